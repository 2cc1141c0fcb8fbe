"""c_attn's GEMV and the split attention in one launch (`roseinfer.kernels.qkv_attention`): where it applies,
against the torch reference and the two kernels it replaces, on odd shapes and every past
length class (empty, one block, block edges, the table's end); its counters left at zero; inside a CUDA graph
between PDL GEMVs, replayed on new lengths; and in the engine, which must give the same tokens with and without
it and really run it."""

import math

import pytest
import torch

BLOCK = 64


def test_fits_one_row_qkv_rows_and_one_block_a_slice():
    from roseinfer.kernels.qkv_attention import fits

    x, w = torch.empty(1, 768), torch.empty(2304, 768)
    kc, table = torch.empty(40, 12, BLOCK, 64), torch.empty(1, 16, dtype=torch.int32)
    assert fits(x, w, kc, table)
    assert not fits(torch.empty(2, 768), w, kc, table)  # one row only
    assert not fits(x, torch.empty(768, 768), kc, table)  # not c_attn's [3 * H * D, C]
    assert not fits(torch.empty(1, 5000), torch.empty(2304, 5000), kc, table)  # past the one-shot tile's K
    assert not fits(x, torch.empty(3 * 12 * 63, 768), torch.empty(40, 12, BLOCK, 63), table)  # odd head_dim
    # so wide a table that the split kernel would put several blocks in a slice
    assert not fits(x, w, kc, torch.empty(1, 4096, dtype=torch.int32))


def _case(g, heads, head_dim, c, width, dtype, bias=True):
    n_blocks = width + 3
    kc = (torch.rand(n_blocks, heads, BLOCK, head_dim, generator=g, device="cuda") + 0.1).to(dtype)
    vc = (torch.rand(n_blocks, heads, BLOCK, head_dim, generator=g, device="cuda") + 0.1).to(dtype)
    x, delta = (torch.randn(1, c, generator=g, device="cuda").to(dtype) for _ in range(2))
    ln_w = (torch.rand(c, generator=g, device="cuda") + 0.5).to(dtype)
    ln_b = (torch.randn(c, generator=g, device="cuda") * 0.1).to(dtype)
    n = 3 * heads * head_dim
    w = (torch.randn(n, c, generator=g, device="cuda") / math.sqrt(c)).to(dtype)
    b = (torch.randn(n, generator=g, device="cuda") * 0.1).to(dtype) if bias else None
    table = torch.randperm(n_blocks, generator=g, device="cuda")[:width].view(1, width).to(torch.int32)
    return x, delta, ln_w, ln_b, w, b, kc, vc, table


def _counters_zero():
    from roseinfer.kernels.qkv_attention import _COUNTERS

    return all(int(c.abs().sum()) == 0 for c in _COUNTERS.values())


@pytest.mark.gpu
@pytest.mark.parametrize("heads,head_dim,c", [(12, 64, 768), (5, 80, 200), (3, 16, 97), (25, 64, 1600)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("pdl", [False, True])
def test_kernel_matches_reference(heads, head_dim, c, dtype, bias, pdl):
    from roseinfer.kernels.pdl import pdl_supported
    from roseinfer.kernels.qkv_attention import norm_qkv_attention_reference, norm_qkv_attention_triton

    if pdl and not pdl_supported():
        pytest.skip("PDL needs Hopper or later")
    g = torch.Generator(device="cuda").manual_seed(heads * 1000 + c)
    width = 16
    x, delta, ln_w, ln_b, w, b, kc, vc, table = _case(g, heads, head_dim, c, width, dtype, bias)
    scale = head_dim**-0.5
    for past in (0, 1, 63, 64, 65, 129, 447, width * BLOCK - 1):
        lens = torch.tensor([past], dtype=torch.int32, device="cuda")
        kc_ref, vc_ref = kc.clone(), vc.clone()
        s_ref, o_ref = norm_qkv_attention_reference(
            x, delta, ln_w, ln_b, 1e-5, w, b, kc_ref, vc_ref, table, lens, scale
        )
        s, o = norm_qkv_attention_triton(
            x, delta, ln_w, ln_b, 1e-5, w, b, kc, vc, table, lens, scale, pdl=pdl
        )
        torch.cuda.synchronize()
        assert torch.equal(s, s_ref), past  # the residual, rounded as torch's add
        torch.testing.assert_close(o.float(), o_ref.float(), atol=2e-2, rtol=2e-2, msg=f"past {past}")
        # the new K/V in its slot (the GEMV's summation order, so close), every other slot untouched
        slot = (int(table[0, past // BLOCK]), past % BLOCK)
        for got, ref in ((kc, kc_ref), (vc, vc_ref)):
            torch.testing.assert_close(
                got[slot[0], :, slot[1]], ref[slot[0], :, slot[1]], atol=2e-2, rtol=2e-2
            )
            got_rest, ref_rest = got.clone(), ref.clone()
            got_rest[slot[0], :, slot[1]] = ref_rest[slot[0], :, slot[1]] = 0
            assert torch.equal(got_rest, ref_rest)
        assert _counters_zero(), past


@pytest.mark.gpu
@pytest.mark.parametrize("heads,head_dim,c", [(12, 64, 768), (5, 80, 200)])
def test_kernel_agrees_with_the_two_kernels_it_replaces(heads, head_dim, c):
    # The same arithmetic as norm_gemv_triton followed by split_decode_attention_triton with one block a slice and
    # the KV append; the reductions' lane order is the compiler's choice per kernel: within an ulp or two.
    from roseinfer.kernels.gemv import norm_gemv_triton
    from roseinfer.kernels.qkv_attention import norm_qkv_attention_triton
    from roseinfer.kernels.split_attention import split_decode_attention_triton

    g = torch.Generator(device="cuda").manual_seed(3)
    width = 16
    x, delta, ln_w, ln_b, w, b, kc, vc, table = _case(g, heads, head_dim, c, width, torch.float16)
    scale = head_dim**-0.5
    for past in (0, 40, 64, 300, width * BLOCK - 1):
        lens = torch.tensor([past], dtype=torch.int32, device="cuda")
        kc2, vc2 = kc.clone(), vc.clone()
        s2, qkv = norm_gemv_triton(x, delta, ln_w, ln_b, 1e-5, w, b, pdl=False)
        q, k, v = qkv.view(1, 3, heads, head_dim).unbind(1)
        o2 = split_decode_attention_triton(q, k, v, kc2, vc2, table, lens, scale, splits=width, append=True)
        s, o = norm_qkv_attention_triton(
            x, delta, ln_w, ln_b, 1e-5, w, b, kc, vc, table, lens, scale, pdl=False
        )
        torch.cuda.synchronize()
        assert torch.equal(s, s2), past
        for got, ref in ((o, o2.reshape(1, -1)), (kc, kc2), (vc, vc2)):
            torch.testing.assert_close(got, ref, atol=4e-3, rtol=2e-3, msg=f"past {past}")


@pytest.mark.gpu
def test_kernel_in_a_graph_between_pdl_gemvs_replayed_on_new_lengths():
    # The captured step's chain at batch 1: a PDL GEMV writes delta, the fused kernel (a dependent launch) reads
    # it, a PDL GEMV (attn_proj's stand-in) reads the attention's output. The grid is fixed at capture; the
    # active slices follow each replay's past, and the counters must be back at zero after every replay.
    from roseinfer.kernels.gemv import gemv_reference, gemv_triton
    from roseinfer.kernels.pdl import pdl_supported
    from roseinfer.kernels.qkv_attention import norm_qkv_attention_reference, norm_qkv_attention_triton

    if not pdl_supported():
        pytest.skip("PDL needs Hopper or later")
    g = torch.Generator(device="cuda").manual_seed(11)
    heads, head_dim, c, width = 12, 64, 768, 16
    x, _, ln_w, ln_b, w, b, kc, vc, table = _case(g, heads, head_dim, c, width, torch.float16)
    h_in = torch.randn(1, c, generator=g, device="cuda").half()
    w_in = (torch.randn(c, c, generator=g, device="cuda") * 0.03).half()  # mlp_proj's stand-in: writes delta
    w_out = (torch.randn(96, c, generator=g, device="cuda") * 0.03).half()  # attn_proj's stand-in
    lens = torch.zeros(1, dtype=torch.int32, device="cuda")
    scale = head_dim**-0.5

    def step():
        delta = gemv_triton(h_in, w_in, None, pdl=True)
        s, o = norm_qkv_attention_triton(
            x, delta, ln_w, ln_b, 1e-5, w, b, kc, vc, table, lens, scale, pdl=True
        )
        return delta, s, o, gemv_triton(o, w_out, None, pdl=True)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        delta, s, o, proj = step()
    for past in (0, 1, 700, width * BLOCK - 1, 65, 5):
        lens.fill_(past)
        h_in.copy_(torch.randn(1, c, generator=g, device="cuda").half())
        kc_ref, vc_ref = kc.clone(), vc.clone()
        graph.replay()
        torch.cuda.synchronize()
        s_ref, o_ref = norm_qkv_attention_reference(
            x, delta, ln_w, ln_b, 1e-5, w, b, kc_ref, vc_ref, table, lens, scale
        )
        assert torch.equal(s, s_ref), past
        torch.testing.assert_close(o.float(), o_ref.float(), atol=2e-2, rtol=2e-2, msg=f"past {past}")
        torch.testing.assert_close(proj.float(), gemv_reference(o, w_out).float(), atol=1e-2, rtol=1e-2)
        torch.testing.assert_close(kc, kc_ref, atol=2e-2, rtol=2e-2)
        assert _counters_zero(), past


@pytest.mark.gpu
def test_engine_with_or_without_it_gives_the_same_tokens(tiny_checkpoint, monkeypatch):
    # fp16, CUDA graphs, paged attention, batch 1 (the only batch it runs at): the fused launch computes exactly
    # what the two kernels do, so the tokens are equal; and it really ran (once per layer at capture).
    from roseinfer import LLM, SamplingParams
    from roseinfer.kernels import qkv_attention
    from tests.roseinfer.test_engine_matches_hf import NEW_TOKENS, make_prompts

    calls = []
    real = qkv_attention.norm_qkv_attention_triton

    def counted(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(qkv_attention, "norm_qkv_attention_triton", counted)
    params = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)
    outputs = {}
    for fused in (True, False):
        calls.clear()
        llm = LLM(
            tiny_checkpoint, device="cuda", dtype="float16", max_batch_size=1, paged_attn=True, cuda_graph=True,
            qkv_attention=fused,
        )  # fmt: skip
        outputs[fused] = [llm.generate([p], params)[0].token_ids for p in make_prompts()[:3]]
        assert bool(calls) == fused, f"qkv_attention={fused}: {len(calls)} calls"
    assert outputs[True] == outputs[False]
