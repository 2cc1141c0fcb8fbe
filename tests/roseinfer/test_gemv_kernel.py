"""The small-batch GEMV kernel (`roseinfer.kernels.gemv`) against its plain-torch reference, on random (never zero)
data over batch sizes and odd shapes, and its dispatch (`roseinfer.linears`)."""

import pytest
import torch

from roseinfer.bench.timing import captured
from roseinfer.kernels.gemv import GemvConfig, gemv_reference, pick_config
from roseinfer.linears import linear, small_batch_gemv, uses_gemv


def _rand(g, *shape, dtype, device, scale=1.0):
    return (torch.randn(*shape, generator=g, device=device) * scale).to(dtype)


def test_reference_is_linear_then_tanh_gelu():
    g = torch.Generator().manual_seed(0)
    x, w, b = (
        _rand(g, 3, 40, dtype=torch.float32, device="cpu"),
        _rand(g, 24, 40, dtype=torch.float32, device="cpu"),
        None,
    )
    torch.testing.assert_close(gemv_reference(x, w), x @ w.T)
    b = _rand(g, 24, dtype=torch.float32, device="cpu")
    pre = x @ w.T + b
    torch.testing.assert_close(
        gemv_reference(x, w, b, gelu=True), torch.nn.functional.gelu(pre, approximate="tanh")
    )


@pytest.mark.parametrize("m,n,k", [(1, 2304, 768), (1, 768, 3072), (8, 3072, 768), (16, 50, 100), (3, 1, 7)])
@pytest.mark.parametrize("pdl", [False, True])
def test_picked_config_fits(m, n, k, pdl):
    cfg = pick_config(m, n, k, pdl)
    assert cfg.one_shot == (pdl and m == 1)
    assert cfg.block_n in (2, 4, 8, 16) and cfg.num_stages >= 1
    if cfg.one_shot:  # one row: the whole K in one slice
        assert m == 1 and cfg.block_k >= k
    else:
        assert 64 <= cfg.block_k <= 512


def test_norm_tile_widens_for_wide_rows_and_more_for_fused_rows():
    # The sweep's 2 columns a program up to GPT-2 medium's 1,024-wide rows; gpt2-xl's 1,600 take 8, and 16 where
    # the delta is a fused all-reduce's rows; the lm_head's vocabulary 8 at any width. Every tile holds all of K.
    from roseinfer.kernels.gemv import pick_norm_config

    assert pick_norm_config(2304, 768).block_n == pick_norm_config(4096, 1024).block_n == 2
    assert pick_norm_config(2304, 768, fused_rows=True).block_n == 2
    assert (pick_norm_config(4800, 1600).block_n, pick_norm_config(4800, 1600).num_warps) == (8, 4)
    assert (pick_norm_config(2496, 1600, True).block_n, pick_norm_config(2496, 1600, True).num_warps) == (
        16,
        8,
    )
    assert pick_norm_config(50304, 1600, True).block_n == pick_norm_config(50304, 768).block_n == 8
    assert (pick_norm_config(7, 4096, True).block_n, pick_norm_config(7, 4096, True).num_warps) == (8, 8)
    for n, k in ((2304, 768), (4800, 1600), (50304, 1600), (7, 4096)):
        for fused_rows in (False, True):
            cfg = pick_norm_config(n, k, fused_rows)
            assert cfg.one_shot and cfg.block_k >= k


def test_dispatch_stays_on_torch_off_cuda_and_outside_the_scope():
    lin = torch.nn.Linear(16, 8)
    x = torch.randn(2, 16)
    assert not uses_gemv(x)
    with small_batch_gemv(8):
        assert not uses_gemv(x)  # CPU
        torch.testing.assert_close(linear(x, lin), lin(x))


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 2, 3, 4, 7, 8, 16])
@pytest.mark.parametrize(
    "n,k",
    [(2304, 768), (768, 768), (3072, 768), (768, 3072), (1152, 384), (1000, 1000), (37, 129), (4800, 1600)],
)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gemv_matches_reference(m, n, k, dtype):
    from roseinfer.kernels.gemv import gemv_triton

    x, w, b = linear_operands(m, n, k, dtype)
    for bias, gelu, pdl in ((b, False, False), (b, True, False), (None, False, False), (b, True, True)):
        # pdl: the one-shot tile at one row (a plain launch here)
        assert_matches_reference(gemv_triton(x, w, bias, gelu, pdl=pdl), x, w, bias, gelu)


def linear_operands(m: int, n: int, k: int, dtype):
    """x [m, k] (strided rows, as a slice of a wider tensor), w [n, k], b [n]: random, never zero, on CUDA."""
    g = torch.Generator(device="cuda").manual_seed(m * 100003 + n * 31 + k)
    x = _rand(g, m, 2 * k, dtype=dtype, device="cuda")[:, :k]
    w = _rand(g, n, k, dtype=dtype, device="cuda", scale=k**-0.5)
    return x, w, _rand(g, n, dtype=dtype, device="cuda")


def assert_matches_reference(out, x, w, bias, gelu):
    """out is `gemv_reference(x, w, bias, gelu)` within fp16 / bf16 rounding, elementwise and as a whole."""
    ref = gemv_reference(x, w, bias, gelu)
    tol = 1e-2 if x.dtype == torch.float16 else 3e-2
    assert out.shape == ref.shape and out.dtype == x.dtype
    torch.testing.assert_close(out.float(), ref.float(), atol=tol, rtol=tol)
    rel = (out.float() - ref.float()).norm() / ref.float().norm()
    assert rel < (2e-3 if x.dtype == torch.float16 else 1e-2), rel


@pytest.mark.gpu
@pytest.mark.parametrize(
    "config", [GemvConfig(2, 64, 2, 1), GemvConfig(16, 128, 8, 2), GemvConfig(8, 512, 4, 3)]
)
def test_gemv_other_configs_match_reference(config):
    from roseinfer.kernels.gemv import gemv_triton

    g = torch.Generator(device="cuda").manual_seed(7)
    x = _rand(g, 5, 1000, dtype=torch.float16, device="cuda")
    w = _rand(g, 777, 1000, dtype=torch.float16, device="cuda", scale=0.03)
    b = _rand(g, 777, dtype=torch.float16, device="cuda")
    out = gemv_triton(x, w, b, gelu=True, config=config)
    torch.testing.assert_close(out.float(), gemv_reference(x, w, b, True).float(), atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
def test_gemv_writes_every_element():
    from roseinfer.kernels.gemv import gemv_triton

    g = torch.Generator(device="cuda").manual_seed(3)
    x = _rand(g, 3, 768, dtype=torch.float16, device="cuda")
    w = _rand(g, 2304, 768, dtype=torch.float16, device="cuda", scale=0.03)
    for _ in range(2):  # the output is fresh each call: poison what the allocator hands back
        torch.full((3, 2304), float("nan"), dtype=torch.float16, device="cuda")
        out = gemv_triton(x, w, None)
        assert torch.isfinite(out).all()


@pytest.mark.gpu
def test_linear_dispatches_by_rows_and_dtype():
    lin = torch.nn.Linear(768, 3072, device="cuda", dtype=torch.float16)
    small, big = torch.randn(4, 768, device="cuda").half(), torch.randn(9, 768, device="cuda").half()
    with small_batch_gemv(8):
        assert uses_gemv(small) and not uses_gemv(big) and not uses_gemv(small.float())
        with torch.no_grad():
            out = linear(small, lin, gelu=True)
        ref = gemv_reference(small, lin.weight, lin.bias, gelu=True)
        torch.testing.assert_close(out.float(), ref.float(), atol=1e-2, rtol=1e-2)
    assert not uses_gemv(small)


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [1, 2, 8])
@pytest.mark.parametrize("early", [False, True])  # each releases the next after its wait, or as it starts
def test_gemv_chain_with_pdl_in_a_graph_matches_reference(rows, early):
    # Programmatic dependent launches inside a captured graph: each GEMV reads the one before's output, so a
    # missing wait would read stale or half-written data. Replayed on fresh inputs, compared at every link.
    from roseinfer.kernels.gemv import gemv_triton
    from roseinfer.kernels.pdl import pdl_scope, pdl_supported

    if not pdl_supported():
        pytest.skip("PDL needs Hopper or later")
    g = torch.Generator(device="cuda").manual_seed(rows)
    dims = [768, 2304, 768, 3072, 768]
    ws = [_rand(g, n, k, dtype=torch.float16, device="cuda", scale=k**-0.5) for k, n in zip(dims, dims[1:])]
    bs = [_rand(g, n, dtype=torch.float16, device="cuda") for n in dims[1:]]
    x = _rand(g, rows, dims[0], dtype=torch.float16, device="cuda")

    def chain():
        outs, h = [], x
        for i, (w, b) in enumerate(zip(ws, bs)):
            h = gemv_triton(h, w, b, gelu=i % 2 == 0, pdl=True)
            outs.append(h)
        return outs

    with pdl_scope(True, early_release=early):
        graph, outs = captured(chain)
    for _ in range(3):
        x.copy_(_rand(g, rows, dims[0], dtype=torch.float16, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        h = x
        for i, (w, b, out) in enumerate(zip(ws, bs, outs)):
            ref = gemv_reference(h, w, b, gelu=i % 2 == 0)
            torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=2e-2)
            h = out  # the next link's reference starts from what the kernel wrote


def test_norm_reference_is_add_then_layernorm_then_linear():
    from roseinfer.kernels.gemv import norm_gemv_reference

    g = torch.Generator().manual_seed(1)
    x, d = (
        _rand(g, 1, 40, dtype=torch.float32, device="cpu"),
        _rand(g, 1, 40, dtype=torch.float32, device="cpu"),
    )
    ln = torch.nn.LayerNorm(40)
    lin = torch.nn.Linear(40, 24)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        s, out = norm_gemv_reference(x, d, ln.weight, ln.bias, ln.eps, lin.weight, lin.bias)
        torch.testing.assert_close(s, x + d)
        torch.testing.assert_close(out, lin(ln(x + d)))


@pytest.mark.gpu
# the block's linears, odd shapes, gpt2-xl's wide rows, and the lm_head's (the wide tile from NORM_WIDE_FROM columns)
@pytest.mark.parametrize(
    "n,k",
    [(2304, 768), (3072, 768), (37, 129), (4800, 1600), (7, 4096), (1, 1000), (50304, 768), (20001, 1600)],
)
@pytest.mark.parametrize("bias,gelu", [(True, False), (True, True), (False, False)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_norm_gemv_matches_reference(n, k, bias, gelu, dtype):
    # The add + LayerNorm prologue: s is exactly x + delta, out as the reference (LayerNorm rounded to dtype).
    from roseinfer.kernels.gemv import norm_gemv_reference, norm_gemv_triton, pick_norm_config

    g = torch.Generator(device="cuda").manual_seed(n + k)
    x, d = (_rand(g, 1, k, dtype=dtype, device="cuda") for _ in range(2))
    ln_w = (torch.rand(k, generator=g, device="cuda") + 0.5).to(dtype)
    ln_b = _rand(g, k, dtype=dtype, device="cuda", scale=0.1)
    w = _rand(g, n, k, dtype=dtype, device="cuda", scale=k**-0.5)
    b = _rand(g, n, dtype=dtype, device="cuda") if bias else None
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
    from roseinfer.kernels.gemv import norm_gemv_triton
    from tests.helpers import exact_split

    g = torch.Generator(device="cuda").manual_seed(n)
    x = _rand(g, 1, 768, dtype=torch.float16, device="cuda")
    parts, whole = exact_split(768, "cuda", seed=n)
    ln_w = (torch.rand(768, generator=g, device="cuda") + 0.5).half()
    ln_b = _rand(g, 768, dtype=torch.float16, device="cuda", scale=0.1)
    w = _rand(g, n, 768, dtype=torch.float16, device="cuda", scale=768**-0.5)
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
    from roseinfer.kernels.gemv import gemv_triton, norm_gemv_reference, norm_gemv_triton
    from roseinfer.kernels.pdl import pdl_scope, pdl_supported

    if not pdl_supported():
        pytest.skip("PDL needs Hopper or later")
    g = torch.Generator(device="cuda").manual_seed(3)
    c = 768

    def w(n, k):
        return _rand(g, n, k, dtype=torch.float16, device="cuda", scale=k**-0.5)

    def vec(n, base=0.0):
        return _rand(g, n, dtype=torch.float16, device="cuda", scale=0.1) + base

    params = dict(
        c_attn=(w(3 * c, c), vec(3 * c)), proj=(w(c, 3 * c), vec(c)), c_fc=(w(4 * c, c), vec(4 * c)),
        mlp=(w(c, 4 * c), vec(c)), ln1=(vec(c, 1.0), vec(c)), ln2=(vec(c, 1.0), vec(c)),
    )  # fmt: skip
    x, delta = (_rand(g, 1, c, dtype=torch.float16, device="cuda") for _ in range(2))

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
        x.copy_(_rand(g, 1, c, dtype=torch.float16, device="cuda"))
        delta.copy_(_rand(g, 1, c, dtype=torch.float16, device="cuda"))
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
    from roseinfer.kernels.gemv import norm_gemv_reference

    g = torch.Generator().manual_seed(2)
    wte, wpe = (
        _rand(g, 50, 40, dtype=torch.float32, device="cpu"),
        _rand(g, 30, 40, dtype=torch.float32, device="cpu"),
    )
    ln_w, ln_b = torch.ones(40), torch.zeros(40)
    w = _rand(g, 24, 40, dtype=torch.float32, device="cpu")
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
    from roseinfer.kernels.gemv import norm_gemv_reference, norm_gemv_triton

    g = torch.Generator(device="cuda").manual_seed(v + k)
    wte, wpe = (
        _rand(g, v, k, dtype=dtype, device="cuda"),
        _rand(g, p, k, dtype=dtype, device="cuda", scale=0.1),
    )
    ln_w = (torch.rand(k, generator=g, device="cuda") + 0.5).to(dtype)
    ln_b = _rand(g, k, dtype=dtype, device="cuda", scale=0.1)
    w = _rand(g, n, k, dtype=dtype, device="cuda", scale=k**-0.5)
    b = _rand(g, n, dtype=dtype, device="cuda")
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
