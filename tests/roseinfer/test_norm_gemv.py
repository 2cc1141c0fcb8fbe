"""The one-row norm GEMV (`roseinfer.kernels.norm_gemv.norm_gemv_triton`: the residual add and LayerNorm in the GEMV's
prologue, the embedding rows gathered in front of the first block, ln_f in front of the lm_head) against its
plain-torch reference, its tiles (`pick_norm_config`) and its dispatch (`roseinfer.linears`). The GEMV itself:
test_gemv_kernel.py."""

import pytest
import torch

from roseinfer.bench.timing import captured
from roseinfer.kernels.gemv import gemv_reference
from roseinfer.linears import small_batch_gemv
from tests.roseinfer.test_gemv_kernel import rand_operand


def test_norm_tile_widens_for_wide_rows_and_more_for_fused_rows():
    # The sweep's 2 columns a program at GPT-2 small's 768-wide rows; gpt2-medium's 1,024 and gpt2-xl's 1,600 take
    # 8, and 16 where the delta is a fused all-reduce's rows; the lm_head's vocabulary 8 at any width. Every tile
    # holds all of K.
    from roseinfer.kernels.norm_gemv import pick_norm_config

    assert pick_norm_config(2304, 768).block_n == 2
    assert pick_norm_config(2304, 768, fused_rows=True).block_n == 2
    assert (pick_norm_config(4096, 1024).block_n, pick_norm_config(4096, 1024).num_warps) == (8, 4)
    assert (pick_norm_config(1536, 1024, True).block_n, pick_norm_config(1536, 1024, True).num_warps) == (
        16,
        4,
    )
    assert (pick_norm_config(4800, 1600).block_n, pick_norm_config(4800, 1600).num_warps) == (8, 4)
    assert (pick_norm_config(2496, 1600, True).block_n, pick_norm_config(2496, 1600, True).num_warps) == (
        16,
        8,
    )
    assert pick_norm_config(50304, 1600, True).block_n == pick_norm_config(50304, 768).block_n == 8
    assert (pick_norm_config(7, 4096, True).block_n, pick_norm_config(7, 4096, True).num_warps) == (8, 8)
    for n, k in ((2304, 768), (4096, 1024), (4800, 1600), (50304, 1600), (7, 4096)):
        for fused_rows in (False, True):
            cfg = pick_norm_config(n, k, fused_rows)
            assert cfg.one_shot and cfg.block_k >= k


def test_norm_reference_is_add_then_layernorm_then_linear():
    from roseinfer.kernels.norm_gemv import norm_gemv_reference

    g = torch.Generator().manual_seed(1)
    x, d = (
        rand_operand(g, 1, 40, dtype=torch.float32, device="cpu"),
        rand_operand(g, 1, 40, dtype=torch.float32, device="cpu"),
    )
    ln = torch.nn.LayerNorm(40)
    lin = torch.nn.Linear(40, 24)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        s, out = norm_gemv_reference(x, d, ln.weight, ln.bias, ln.eps, lin.weight, lin.bias)
        torch.testing.assert_close(s, x + d)
        torch.testing.assert_close(out, lin(ln(x + d)))


@pytest.mark.gpu
# the block's linears, odd shapes, gpt2-medium's and gpt2-xl's wide rows, and the lm_head's (the wide tile from NORM_WIDE_FROM columns)
@pytest.mark.parametrize(
    "n,k",
    [
        (2304, 768),
        (3072, 768),
        (37, 129),
        (4096, 1024),
        (4800, 1600),
        (7, 4096),
        (1, 1000),
        (50304, 768),
        (20001, 1600),
    ],
)
@pytest.mark.parametrize("bias,gelu", [(True, False), (True, True), (False, False)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_norm_gemv_matches_reference(n, k, bias, gelu, dtype):
    # The add + LayerNorm prologue: s is exactly x + delta, out as the reference (LayerNorm rounded to dtype).
    from roseinfer.kernels.norm_gemv import norm_gemv_reference, norm_gemv_triton, pick_norm_config

    g = torch.Generator(device="cuda").manual_seed(n + k)
    x, d = (rand_operand(g, 1, k, dtype=dtype, device="cuda") for _ in range(2))
    ln_w = (torch.rand(k, generator=g, device="cuda") + 0.5).to(dtype)
    ln_b = rand_operand(g, k, dtype=dtype, device="cuda", scale=0.1)
    w = rand_operand(g, n, k, dtype=dtype, device="cuda", scale=k**-0.5)
    b = rand_operand(g, n, dtype=dtype, device="cuda") if bias else None
    s_ref, ref = norm_gemv_reference(x, d, ln_w, ln_b, 1e-5, w, b, gelu)
    # the picked tile without and with PDL, and with PDL the tile a fused all-reduce's reader picks
    for pdl, fused_rows in ((False, False), (True, False), (True, True)):
        config = pick_norm_config(n, k, fused_rows)
        s, out = norm_gemv_triton(x, d, ln_w, ln_b, 1e-5, w, b, gelu, pdl=pdl, config=config)
        assert torch.equal(s, s_ref)
        tol = 2e-2 if dtype == torch.bfloat16 else 1e-2
        torch.testing.assert_close(out.float(), ref.float(), atol=tol, rtol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("n", [2304, 3072, 50304])
def test_norm_gemv_sums_a_split_delta_as_its_whole(n):
    # The CUDA MLP's output as the next c_attn's (or the lm_head's) delta: a split sum the prologue adds up. Every
    # value a multiple of 2^-10 (tests.helpers.exact_split): the rows' sum is exact, so all is bit for bit.
    from roseinfer.kernels.norm_gemv import norm_gemv_triton
    from tests.helpers import exact_split

    g = torch.Generator(device="cuda").manual_seed(n)
    x = rand_operand(g, 1, 768, dtype=torch.float16, device="cuda")
    parts, whole = exact_split(768, "cuda", seed=n)
    ln_w = (torch.rand(768, generator=g, device="cuda") + 0.5).half()
    ln_b = rand_operand(g, 768, dtype=torch.float16, device="cuda", scale=0.1)
    w = rand_operand(g, n, 768, dtype=torch.float16, device="cuda", scale=768**-0.5)
    for pdl in (False, True):
        s, out = norm_gemv_triton(x, parts, ln_w, ln_b, 1e-5, w, pdl=pdl)
        s_whole, out_whole = norm_gemv_triton(x, whole, ln_w, ln_b, 1e-5, w, pdl=pdl)
        assert s.shape == (1, 768) and out.shape == (1, n)
        assert torch.equal(s, s_whole) and torch.equal(out, out_whole)


@pytest.mark.gpu
@pytest.mark.parametrize("early", [False, True])
def test_norm_gemv_chain_with_pdl_in_a_graph_matches_reference(early):
    # A GPT-2 layer's shape at batch 1 as the engine runs it: [add + LN + c_attn], attn_proj, [add + LN + c_fc
    # + GELU], mlp_proj, each a PDL launch reading the kernel before's output (and the residual program 0 wrote),
    # replayed on fresh inputs and checked link by link against the reference.
    from roseinfer.kernels.gemv import gemv_triton
    from roseinfer.kernels.norm_gemv import norm_gemv_reference, norm_gemv_triton
    from roseinfer.kernels.pdl import pdl_scope, pdl_supported

    if not pdl_supported():
        pytest.skip("PDL needs Hopper or later")
    g = torch.Generator(device="cuda").manual_seed(3)
    c = 768

    def w(n, k):
        return rand_operand(g, n, k, dtype=torch.float16, device="cuda", scale=k**-0.5)

    def vec(n, base=0.0):
        return rand_operand(g, n, dtype=torch.float16, device="cuda", scale=0.1) + base

    params = dict(
        c_attn=(w(3 * c, c), vec(3 * c)), proj=(w(c, 3 * c), vec(c)), c_fc=(w(4 * c, c), vec(4 * c)),
        mlp=(w(c, 4 * c), vec(c)), ln1=(vec(c, 1.0), vec(c)), ln2=(vec(c, 1.0), vec(c)),
    )  # fmt: skip
    x, delta = (rand_operand(g, 1, c, dtype=torch.float16, device="cuda") for _ in range(2))

    def layer(x, delta, impl):
        s1, qkv = impl[0](x, delta, *params["ln1"], 1e-5, *params["c_attn"], False)
        a = impl[1](qkv, *params["proj"])
        s2, hid = impl[0](s1, a, *params["ln2"], 1e-5, *params["c_fc"], True)
        return s1, qkv, a, s2, hid, impl[1](hid, *params["mlp"])

    ours = (
        lambda *a: norm_gemv_triton(*a, pdl=True),
        lambda h, wt, b: gemv_triton(h, wt, b, pdl=True),
    )
    with pdl_scope(True, early_release=early):
        graph, outs = captured(lambda: layer(x, delta, ours))
    for _ in range(3):
        x.copy_(rand_operand(g, 1, c, dtype=torch.float16, device="cuda"))
        delta.copy_(rand_operand(g, 1, c, dtype=torch.float16, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        s1, qkv, a, s2, hid, m = outs
        s1_ref, qkv_ref = norm_gemv_reference(x, delta, *params["ln1"], 1e-5, *params["c_attn"])
        assert torch.equal(s1, s1_ref)
        torch.testing.assert_close(qkv.float(), qkv_ref.float(), atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(
            a.float(), gemv_reference(qkv, *params["proj"]).float(), atol=2e-2, rtol=2e-2
        )
        s2_ref, hid_ref = norm_gemv_reference(s1, a, *params["ln2"], 1e-5, *params["c_fc"], gelu=True)
        assert torch.equal(s2, s2_ref)
        torch.testing.assert_close(hid.float(), hid_ref.float(), atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(
            m.float(), gemv_reference(hid, *params["mlp"]).float(), atol=2e-2, rtol=2e-2
        )


@pytest.mark.gpu
def test_norm_linear_dispatch_at_one_row_inside_the_scope_only():
    from roseinfer.linears import norm_gemv_applies

    lin = torch.nn.Linear(768, 2304, device="cuda", dtype=torch.float16)
    one, two = torch.randn(1, 768, device="cuda").half(), torch.randn(2, 768, device="cuda").half()
    with small_batch_gemv(8, norm_prologue=True):
        assert norm_gemv_applies(one, one, lin) and not norm_gemv_applies(two, two, lin)
        assert not norm_gemv_applies(one.float(), one.float(), lin)
    with small_batch_gemv(8):
        assert not norm_gemv_applies(one, one, lin)
    assert not norm_gemv_applies(one, one, lin)


def test_norm_linear_never_applies_off_cuda():
    from roseinfer.linears import norm_gemv_applies

    lin = torch.nn.Linear(16, 8)
    x = torch.randn(1, 16)
    with small_batch_gemv(8, norm_prologue=True):
        assert not norm_gemv_applies(x, x, lin)


def test_norm_reference_gathers_rows_by_index():
    from roseinfer.kernels.norm_gemv import norm_gemv_reference

    g = torch.Generator().manual_seed(2)
    wte, wpe = (
        rand_operand(g, 50, 40, dtype=torch.float32, device="cpu"),
        rand_operand(g, 30, 40, dtype=torch.float32, device="cpu"),
    )
    ln_w, ln_b = torch.ones(40), torch.zeros(40)
    w = rand_operand(g, 24, 40, dtype=torch.float32, device="cpu")
    ids, pos = torch.tensor([17]), torch.tensor([29])
    s, out = norm_gemv_reference(wte, wpe, ln_w, ln_b, 1e-5, w, index=(ids, pos))
    s_ref, out_ref = norm_gemv_reference(wte[17:18], wpe[29:30], ln_w, ln_b, 1e-5, w)
    assert torch.equal(s, s_ref) and torch.equal(out, out_ref)


@pytest.mark.gpu
@pytest.mark.parametrize("v,p,k,n", [(50304, 1024, 768, 2304), (1000, 37, 129, 37), (300, 9, 1600, 4800)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_norm_gemv_gathering_embedding_rows_matches_reference(v, p, k, n, dtype):
    # The first block's c_attn at one token: x and delta rows gathered from the tables at the token id and position
    # (int64, as the engine stages them; first, last and middle rows), s exactly the embeddings' sum.
    from roseinfer.kernels.norm_gemv import norm_gemv_reference, norm_gemv_triton

    g = torch.Generator(device="cuda").manual_seed(v + k)
    wte, wpe = (
        rand_operand(g, v, k, dtype=dtype, device="cuda"),
        rand_operand(g, p, k, dtype=dtype, device="cuda", scale=0.1),
    )
    ln_w = (torch.rand(k, generator=g, device="cuda") + 0.5).to(dtype)
    ln_b = rand_operand(g, k, dtype=dtype, device="cuda", scale=0.1)
    w = rand_operand(g, n, k, dtype=dtype, device="cuda", scale=k**-0.5)
    b = rand_operand(g, n, dtype=dtype, device="cuda")
    for token, pos in ((0, 0), (v - 1, p - 1), (v // 3, p // 2)):
        index = (torch.tensor([token], device="cuda"), torch.tensor([pos], device="cuda"))
        s_ref, ref = norm_gemv_reference(wte[token : token + 1], wpe[pos : pos + 1], ln_w, ln_b, 1e-5, w, b)
        for pdl in (False, True):
            s, out = norm_gemv_triton(wte, wpe, ln_w, ln_b, 1e-5, w, b, pdl=pdl, index=index)
            assert torch.equal(s, s_ref)
            tol = 2e-2 if dtype == torch.bfloat16 else 1e-2
            torch.testing.assert_close(out.float(), ref.float(), atol=tol, rtol=tol)


@pytest.mark.gpu
def test_embedding_gather_dispatch_for_one_token_inside_the_scope_only():
    from roseinfer.linears import embedding_gather_applies

    lin = torch.nn.Linear(768, 2304, device="cuda", dtype=torch.float16)
    wte = torch.randn(50304, 768, device="cuda").half()
    wpe = torch.randn(1024, 768, device="cuda").half()
    one, two = (
        torch.zeros(1, dtype=torch.int64, device="cuda"),
        torch.zeros(2, dtype=torch.int64, device="cuda"),
    )
    with small_batch_gemv(8, norm_prologue=True, embedding_gather=True):
        assert embedding_gather_applies(one, wte, wpe, lin) and not embedding_gather_applies(
            two, wte, wpe, lin
        )
        assert not embedding_gather_applies(one, wte.float(), wpe.float(), lin)
    with small_batch_gemv(8, norm_prologue=True):
        assert not embedding_gather_applies(one, wte, wpe, lin)
    with small_batch_gemv(8, embedding_gather=True):  # the gather is part of the norm prologue
        assert not embedding_gather_applies(one, wte, wpe, lin)


@pytest.mark.gpu
def test_lm_head_gemv_dispatch_at_one_row_inside_the_scope_only():
    from roseinfer.linears import lm_head_gemv_applies

    head = torch.randn(50304, 768, device="cuda").half()
    one, two = torch.randn(1, 768, device="cuda").half(), torch.randn(2, 768, device="cuda").half()
    with small_batch_gemv(8, norm_prologue=True, lm_head=True):
        assert lm_head_gemv_applies(one, one, head) and not lm_head_gemv_applies(two, two, head)
        assert not lm_head_gemv_applies(one.float(), one.float(), head.float())
    with small_batch_gemv(8, norm_prologue=True):
        assert not lm_head_gemv_applies(one, one, head)
    with small_batch_gemv(8, lm_head=True):  # ln_f in the prologue: part of the norm prologue
        assert not lm_head_gemv_applies(one, one, head)
