"""The split-context paged-attention kernel (`roseinfer.kernels.split_attention`) against the torch reference, on
random (never zero) data: odd shapes, lengths at block edges, every slice count, the KV append, its counters
left at zero for the next launch, inside a CUDA graph replayed on new lengths, and in the engine."""

import pytest
import torch

from roseinfer.bench.timing import captured
from roseinfer.kernels.split_attention import (
    MAX_PROGRAMS,
    ONE_PASS_FROM,
    PREFETCH_MAX_PAIRS,
    PREFETCH_MAX_WIDTH,
    SERIAL_BLOCKS,
    SERIAL_FROM,
    pick_prefetch,
    pick_serial_blocks,
    pick_splits,
)

BLOCK = 64


def test_pick_splits_one_block_a_slice_at_small_batches_only():
    assert pick_splits(1, 12, 16) == 16  # 12 programs alone would leave most of 132 SMs idle
    assert pick_splits(1, 12, 5) == 5  # never more slices than blocks
    assert pick_splits(4, 12, 16) == 16
    assert pick_splits(5, 12, 16) * 5 * 12 <= MAX_PROGRAMS
    assert pick_splits(8, 12, 16) == 1  # 96 pairs: the one-pass kernel (the split was slower at short pasts)
    assert pick_splits(ONE_PASS_FROM, 1, 16) == 1 and pick_splits(ONE_PASS_FROM - 1, 1, 16) == 16


def test_pick_serial_blocks_short_pasts_unsplit_from_batch_4_only():
    assert pick_serial_blocks(1, 12) == 0 and pick_serial_blocks(2, 12) == 0  # split faster at every past
    assert pick_serial_blocks(4, 12) == SERIAL_BLOCKS > 0  # the merge cost more than it saved at 128 tokens
    assert pick_serial_blocks(SERIAL_FROM, 1) == SERIAL_BLOCKS and pick_serial_blocks(SERIAL_FROM - 1, 1) == 0


def test_pick_prefetch_one_block_a_slice_few_pairs_and_narrow_models_only():
    assert pick_prefetch(1, 12, 64, 16, 16, 0) and pick_prefetch(2, 12, 64, 16, 16, 0)  # GPT-2 small: faster
    assert pick_prefetch(2, 16, 64, 16, 16, 0)  # gpt2-medium at batch 2 (32 pairs): faster
    assert not pick_prefetch(3, 12, 64, 16, 16, 0)  # 36 pairs: past what was measured faster
    assert not pick_prefetch(1, 25, 64, 16, 16, 0)  # gpt2-xl (width 1600): slower
    assert PREFETCH_MAX_PAIRS == 32 and PREFETCH_MAX_WIDTH == 1024
    assert not pick_prefetch(1, 12, 64, 8, 16, 0)  # two blocks a slice
    assert not pick_prefetch(2, 12, 64, 16, 16, 2)  # short pasts walked by slice 0 alone


def _case(g, batch, heads, head_dim, max_blocks, dtype):
    n_blocks = batch * max_blocks + 3
    kc = (torch.rand(n_blocks, heads, BLOCK, head_dim, generator=g, device="cuda") + 0.1).to(dtype)
    vc = (torch.rand(n_blocks, heads, BLOCK, head_dim, generator=g, device="cuda") + 0.1).to(dtype)
    q, k_new, v_new = (
        torch.randn(batch, heads, head_dim, generator=g, device="cuda").to(dtype) for _ in range(3)
    )
    table = torch.randperm(n_blocks, generator=g, device="cuda")[: batch * max_blocks].view(batch, max_blocks)
    return q, k_new, v_new, kc, vc, table


def _reference(q, k_new, v_new, kc, vc, table, past, scale):
    from roseinfer.attention import paged_decode_attention

    return paged_decode_attention(
        q.float(), k_new.float(), v_new.float(), kc.float(), vc.float(), table, past, scale
    )


@pytest.mark.gpu
@pytest.mark.parametrize("batch,heads", [(1, 12), (3, 5), (8, 12)])
@pytest.mark.parametrize("head_dim", [64, 80])
@pytest.mark.parametrize("splits", [2, 3, 7])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_kernel_matches_reference(batch, heads, head_dim, splits, dtype):
    from roseinfer.kernels.split_attention import _COUNTERS, split_decode_attention_triton

    g = torch.Generator(device="cuda").manual_seed(batch * head_dim + splits)
    max_blocks = 7
    q, k_new, v_new, kc, vc, table = _case(g, batch, heads, head_dim, max_blocks, dtype)
    # 0 (only the new token), block edges, and the full table; with 7 blocks and 3 slices, slices of 3, 3, 1
    edges = torch.tensor([0, 1, 63, 64, 65, 200, 7 * BLOCK - 1, 129], device="cuda")
    past = edges[torch.arange(batch, device="cuda") % len(edges)]
    scale = head_dim**-0.5
    ref = _reference(q, k_new, v_new, kc, vc, table, past, scale)
    tol = 2e-3 if dtype == torch.float16 else 1e-5
    for _ in range(2):  # the second launch finds the counters the first left
        out = split_decode_attention_triton(q, k_new, v_new, kc, vc, table, past, scale, splits)
        torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)
    assert int(_COUNTERS[q.device].abs().sum()) == 0


@pytest.mark.gpu
@pytest.mark.parametrize("serial", [1, 2, 3, 7])
@pytest.mark.parametrize("append", [False, True])
def test_kernel_short_pasts_walked_by_one_slice_match_reference(serial, append):
    # Pasts on both sides of `serial` blocks in one launch: the short ones walked by slice 0 alone (no merge),
    # the others split; the counters back at zero for both kinds.
    from roseinfer.kernels.kv_append import kv_append_reference
    from roseinfer.kernels.split_attention import _COUNTERS, split_decode_attention_triton

    g = torch.Generator(device="cuda").manual_seed(serial)
    batch, heads, head_dim, max_blocks = 12, 5, 64, 7
    q, k_new, v_new, kc, vc, table = _case(g, batch, heads, head_dim, max_blocks, torch.float16)
    past = torch.tensor(
        [0, 1, 64, 65, 127, 128, 129, 192, 193, 256, 300, max_blocks * BLOCK - 1], device="cuda"
    )
    rows = torch.arange(batch, device="cuda")
    kc_ref, vc_ref = kc.clone(), vc.clone()
    if append:
        kv_append_reference(kc_ref, vc_ref, k_new, v_new, table[rows, past // BLOCK], past % BLOCK)
    ref = _reference(q, k_new, v_new, kc, vc, table, past, head_dim**-0.5)
    for _ in range(2):  # the second launch finds the counters the first left
        out = split_decode_attention_triton(
            q, k_new, v_new, kc, vc, table, past, head_dim**-0.5, splits=max_blocks, append=append,
            serial_blocks=serial,
        )  # fmt: skip
        torch.testing.assert_close(out.float(), ref, atol=2e-3, rtol=2e-3)
    assert int(_COUNTERS[q.device].abs().sum()) == 0
    assert torch.equal(kc, kc_ref) and torch.equal(vc, vc_ref)


@pytest.mark.gpu
@pytest.mark.parametrize("batch,heads,head_dim", [(1, 12, 64), (3, 5, 80)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("append", [False, True])
def test_kernel_prefetching_its_block_matches_reference(batch, heads, head_dim, dtype, append):
    # One block a slice with each slice's block loaded before the wait (what a dependent launch does at batch 1):
    # every past class, including an empty past (slice 0's block masked off) and the table's last token.
    from roseinfer.kernels.kv_append import kv_append_reference
    from roseinfer.kernels.split_attention import _COUNTERS, split_decode_attention_triton

    g = torch.Generator(device="cuda").manual_seed(batch + head_dim)
    max_blocks = 7
    q, k_new, v_new, kc, vc, table = _case(g, batch, heads, head_dim, max_blocks, dtype)
    rows = torch.arange(batch, device="cuda")
    tol = 2e-3 if dtype == torch.float16 else 1e-5
    for lengths in ([0, 1, 64], [63, 65, 129], [max_blocks * BLOCK - 1, 200, 0]):
        past = torch.tensor(lengths[:batch], device="cuda")
        kc_ref, vc_ref = kc.clone(), vc.clone()
        if append:
            kv_append_reference(kc_ref, vc_ref, k_new, v_new, table[rows, past // BLOCK], past % BLOCK)
        ref = _reference(q, k_new, v_new, kc, vc, table, past, head_dim**-0.5)
        out = split_decode_attention_triton(
            q,
            k_new,
            v_new,
            kc,
            vc,
            table,
            past,
            head_dim**-0.5,
            splits=max_blocks,
            append=append,
            prefetch=True,
        )
        torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol, msg=f"past {lengths}")
        assert torch.equal(kc, kc_ref) and torch.equal(vc, vc_ref)
    assert int(_COUNTERS[q.device].abs().sum()) == 0


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 5])
def test_kernel_with_append_writes_the_slot_and_attends_the_same(batch):
    from roseinfer.kernels.kv_append import kv_append_reference
    from roseinfer.kernels.split_attention import split_decode_attention_triton

    g = torch.Generator(device="cuda").manual_seed(batch)
    heads, head_dim = 12, 64
    q, k_new, v_new, kc, vc, table = _case(g, batch, heads, head_dim, 5, torch.float16)
    past = torch.tensor([0, 63, 64, 130, 5 * BLOCK - 1], device="cuda")[:batch]
    rows = torch.arange(batch, device="cuda")
    kc_ref, vc_ref = kc.clone(), vc.clone()
    kv_append_reference(kc_ref, vc_ref, k_new, v_new, table[rows, past // BLOCK], past % BLOCK)
    ref = _reference(q, k_new, v_new, kc, vc, table, past, head_dim**-0.5)
    out = split_decode_attention_triton(
        q, k_new, v_new, kc, vc, table, past, head_dim**-0.5, splits=5, append=True
    )
    torch.testing.assert_close(out.float(), ref, atol=2e-3, rtol=2e-3)
    assert torch.equal(kc, kc_ref) and torch.equal(vc, vc_ref)


@pytest.mark.gpu
@pytest.mark.parametrize("pdl", [False, "launch", "release", "prefetch"])
def test_kernel_in_a_graph_replayed_on_new_lengths(pdl):
    # The grid is fixed at capture; the active slices follow each replay's lengths, and the counters must be
    # back at zero after every replay for the next one to merge at the right ticket. "launch": a dependent
    # launch itself; "release": launched plainly, releasing a following PDL kernel early; "prefetch": a dependent
    # launch whose slices (one block each) load their block before the wait (the engine's choice).
    from roseinfer.kernels.gemv import gemv_reference, gemv_triton
    from roseinfer.kernels.pdl import pdl_scope, pdl_supported
    from roseinfer.kernels.split_attention import split_decode_attention_triton

    if pdl and not pdl_supported():
        pytest.skip("PDL needs Hopper or later")
    g = torch.Generator(device="cuda").manual_seed(7)
    batch, heads, head_dim = 2, 12, 64
    q, k_new, v_new, kc, vc, table = _case(g, batch, heads, head_dim, 16, torch.float16)
    past = torch.zeros(batch, dtype=torch.int64, device="cuda")
    scale = head_dim**-0.5
    w = (torch.randn(96, heads * head_dim, generator=g, device="cuda") * 0.03).half()  # attn_proj's stand-in

    def step():
        with pdl_scope(
            bool(pdl),
            attention=pdl == "launch",
            attention_release=pdl == "release",
            attention_prefetch=pdl == "prefetch",
        ):
            out = split_decode_attention_triton(q, k_new, v_new, kc, vc, table, past, scale, splits=16)
            return out, gemv_triton(
                out.view(batch, -1), w, None, pdl=bool(pdl)
            )  # reads the attention's output

    graph, (out, proj) = captured(step)
    for lengths in ([0, 1], [64, 700], [1023, 65], [5, 5]):
        past.copy_(torch.tensor(lengths, device="cuda"))
        q.copy_(torch.randn(batch, heads, head_dim, generator=g, device="cuda").half())
        graph.replay()
        torch.cuda.synchronize()
        ref = _reference(q, k_new, v_new, kc, vc, table, past, scale)
        torch.testing.assert_close(out.float(), ref, atol=2e-3, rtol=2e-3)
        proj_ref = gemv_reference(out.view(batch, -1), w)
        torch.testing.assert_close(proj.float(), proj_ref.float(), atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "early", [False, True]
)  # each kernel releases the next after its wait, or as it starts
def test_prefetching_kernel_after_the_gemv_that_writes_its_qkv_in_a_graph(early):
    # The engine's chain at batch 1: a PDL GEMV writes q, k and v; the attention, a dependent launch, loads its
    # past block before its wait and reads q, k, v after it; a PDL GEMV reads the attention's output. Replayed
    # on new inputs and lengths, each output must match the reference on that replay's own q, k, v (a read of
    # q, k or v moved above the wait would see the previous replay's), and the counters must end at zero.
    from roseinfer.kernels.pdl import pdl_scope, pdl_supported
    from roseinfer.kernels.split_attention import _COUNTERS, split_decode_attention_triton

    if not pdl_supported():
        pytest.skip("PDL needs Hopper or later")
    g = torch.Generator(device="cuda").manual_seed(21)
    width = 16
    _, _, _, kc, vc, table = _case(g, 1, 12, 64, width, torch.float16)
    past = torch.zeros(1, dtype=torch.int64, device="cuda")
    check_attention_between_gemvs_in_a_graph(
        lambda q, k, v: split_decode_attention_triton(q, k, v, kc, vc, table, past, 64**-0.5, splits=width, append=True),
        lambda: pdl_scope(True, attention_prefetch=True, early_release=early),
        kc, vc, table, past, g,
        after=lambda q: int(_COUNTERS[q.device].abs().sum()) == 0,
    )  # fmt: skip


def check_attention_between_gemvs_in_a_graph(attend, scope, kc, vc, table, past, g, after=lambda q: True):
    """The engine's chain at batch 1, captured under `scope()`: a PDL GEMV writes q, k and v, `attend(q, k, v)`
    (with the append, over kc, vc [N, 12, BLOCK, 64], table [1, M] and past [1]) reads them, a PDL GEMV reads its
    output. Replayed on new inputs and lengths up to the table's, each output must match the reference on that
    replay's own q, k, v, the new token must be in its slot, and `after(q)` must hold."""
    from roseinfer.kernels.gemv import gemv_reference, gemv_triton

    heads, head_dim, c, width = 12, 64, 768, table.shape[1]
    h_in = torch.randn(1, c, generator=g, device="cuda").half()
    w_qkv = (
        torch.randn(3 * heads * head_dim, c, generator=g, device="cuda") * 0.03
    ).half()  # c_attn's stand-in
    w_out = (torch.randn(96, heads * head_dim, generator=g, device="cuda") * 0.03).half()  # attn_proj's

    def step():
        with scope():
            qkv = gemv_triton(h_in, w_qkv, None)  # [1, 3 * H * D]
            out = attend(*qkv.view(1, 3, heads, head_dim).unbind(1))  # q, k, v each [1, H, D]
            return qkv, out, gemv_triton(out.view(1, -1), w_out, None)

    graph, (qkv, out, proj) = captured(step)
    for length in (0, 1, 700, width * BLOCK - 1, 65, 5):
        past.fill_(length)
        h_in.copy_(torch.randn(1, c, generator=g, device="cuda").half())
        kc_before, vc_before = kc.clone(), vc.clone()
        graph.replay()
        torch.cuda.synchronize()
        q, k, v = qkv.view(1, 3, heads, head_dim).unbind(1)
        ref = _reference(q, k, v, kc_before, vc_before, table, past, head_dim**-0.5)
        torch.testing.assert_close(out.float(), ref, atol=2e-3, rtol=2e-3, msg=f"past {length}")
        torch.testing.assert_close(
            proj.float(), gemv_reference(out.view(1, -1), w_out).float(), atol=1e-2, rtol=1e-2
        )
        slot = (int(table[0, length // BLOCK]), slice(None), length % BLOCK)
        assert torch.equal(kc[slot], k[0]) and torch.equal(vc[slot], v[0]), length
        assert after(q), length


@pytest.mark.gpu
def test_engine_split_or_not_gives_the_same_tokens(tiny_checkpoint):
    # fp32, CUDA graphs, paged attention: the engine with the split kernel (default: launched as a prefetching
    # dependent where a slice is one block, on Hopper) equals it launched plainly, the one-pass kernel (the designs
    # before it, captured through `GraphKernels`) and Hugging Face greedy, token for token.
    from roseinfer import LLM, SamplingParams
    from roseinfer.graph_kernels import GraphKernels
    from tests.roseinfer.test_engine_cuda import hf_outputs
    from tests.roseinfer.test_engine_matches_hf import NEW_TOKENS, make_prompts

    torch.backends.cuda.matmul.allow_tf32 = False
    ref = hf_outputs(tiny_checkpoint, torch.float32)
    params = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)
    for split, prefetch in ((True, True), (True, False), (False, False)):
        llm = LLM(tiny_checkpoint, device="cuda", max_batch_size=8, paged_attn=True, cuda_graph=True)
        if not (split and prefetch):
            kernels = GraphKernels(split_attention=split, pdl_attention_prefetch=prefetch)
            llm.engine.use_static_decode(capture=True, kernels=kernels)
        got = [o.token_ids for o in llm.generate(make_prompts(), params)]
        # and one at a time: batch 1, one block a slice, where the prefetch runs
        got_one = [llm.generate([p], params)[0].token_ids for p in make_prompts()[:4]]
        assert got == ref and got_one == ref[:4], f"split_attention={split} attention_prefetch={prefetch}"
