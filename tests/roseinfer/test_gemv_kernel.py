"""The small-batch GEMV kernel (`roseinfer.kernels.gemv`) against its plain-torch reference, on random (never zero)
data over batch sizes and odd shapes, and its dispatch (`roseinfer.linears`)."""

import pytest
import torch

from roseinfer.bench.timing import captured
from roseinfer.kernels.gemv import GemvConfig, gemv_reference, pick_config
from roseinfer.linears import linear, small_batch_gemv, uses_gemv


def rand_operand(g, *shape, dtype, device, scale=1.0):
    return (torch.randn(*shape, generator=g, device=device) * scale).to(dtype)


def test_reference_is_linear_then_tanh_gelu():
    g = torch.Generator().manual_seed(0)
    x, w, b = (
        rand_operand(g, 3, 40, dtype=torch.float32, device="cpu"),
        rand_operand(g, 24, 40, dtype=torch.float32, device="cpu"),
        None,
    )
    torch.testing.assert_close(gemv_reference(x, w), x @ w.T)
    b = rand_operand(g, 24, dtype=torch.float32, device="cpu")
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
    x = rand_operand(g, m, 2 * k, dtype=dtype, device="cuda")[:, :k]
    w = rand_operand(g, n, k, dtype=dtype, device="cuda", scale=k**-0.5)
    return x, w, rand_operand(g, n, dtype=dtype, device="cuda")


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
    x = rand_operand(g, 5, 1000, dtype=torch.float16, device="cuda")
    w = rand_operand(g, 777, 1000, dtype=torch.float16, device="cuda", scale=0.03)
    b = rand_operand(g, 777, dtype=torch.float16, device="cuda")
    out = gemv_triton(x, w, b, gelu=True, config=config)
    torch.testing.assert_close(out.float(), gemv_reference(x, w, b, True).float(), atol=1e-2, rtol=1e-2)


@pytest.mark.gpu
def test_gemv_writes_every_element():
    from roseinfer.kernels.gemv import gemv_triton

    g = torch.Generator(device="cuda").manual_seed(3)
    x = rand_operand(g, 3, 768, dtype=torch.float16, device="cuda")
    w = rand_operand(g, 2304, 768, dtype=torch.float16, device="cuda", scale=0.03)
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
    ws = [
        rand_operand(g, n, k, dtype=torch.float16, device="cuda", scale=k**-0.5)
        for k, n in zip(dims, dims[1:])
    ]
    bs = [rand_operand(g, n, dtype=torch.float16, device="cuda") for n in dims[1:]]
    x = rand_operand(g, rows, dims[0], dtype=torch.float16, device="cuda")

    def chain():
        outs, h = [], x
        for i, (w, b) in enumerate(zip(ws, bs)):
            h = gemv_triton(h, w, b, gelu=i % 2 == 0, pdl=True)
            outs.append(h)
        return outs

    with pdl_scope(True, early_release=early):
        graph, outs = captured(chain)
    for _ in range(3):
        x.copy_(rand_operand(g, rows, dims[0], dtype=torch.float16, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        h = x
        for i, (w, b, out) in enumerate(zip(ws, bs, outs)):
            ref = gemv_reference(h, w, b, gelu=i % 2 == 0)
            torch.testing.assert_close(out.float(), ref.float(), atol=2e-2, rtol=2e-2)
            h = out  # the next link's reference starts from what the kernel wrote
