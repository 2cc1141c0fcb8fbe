"""The skinny GEMM (`roseinfer.kernels.skinny_gemm`) against the GEMV's plain-torch reference on random data over
row counts and odd shapes, its split-K bookkeeping (counters back at zero, the same bits every launch), chains
of dependent launches in a graph, and its dispatch (`roseinfer.linears`)."""

import pytest
import torch

from roseinfer.kernels.gemv import gemv_reference
from roseinfer.kernels.skinny_gemm import (
    MAX_ROWS,
    SkinnyConfig,
    SkinnyScratch,
    pick_skinny_config,
    skinny_gemm_fits,
)
from roseinfer.linears import linear, small_batch_gemv, uses_skinny_gemm
from tests.roseinfer.test_gemv_kernel import assert_matches_reference, linear_operands


def _rand(g, *shape, dtype, device, scale=1.0):
    return (torch.randn(*shape, generator=g, device=device) * scale).to(dtype)


@pytest.mark.parametrize(
    "m,n,k", [(64, 4096, 1024), (16, 1024, 4096), (9, 37, 64), (4, 6400, 1600), (8, 50, 192)]
)
def test_picked_config_divides_k(m, n, k):
    cfg = pick_skinny_config(m, n, k)
    assert k % cfg.slice_k == 0 and cfg.slice_k & (cfg.slice_k - 1) == 0 and 64 <= cfg.slice_k <= 512
    assert cfg.block_n in (32, 64) and cfg.num_warps in (4, 8)


def test_picked_config_is_the_sweeps_best_on_gpt2_small():
    # scripts/bench_gemv.py --skinny --sweep on the H100 (docs/BENCHMARKS.md): c_attn, attn_proj, c_fc, mlp_proj
    assert [pick_skinny_config(16, n, k) for n, k in ((2304, 768), (768, 768), (3072, 768), (768, 3072))] == [
        SkinnyConfig(64, 256, 8),
        SkinnyConfig(32, 256, 4),
        SkinnyConfig(64, 256, 8),
        SkinnyConfig(32, 512, 8),
    ]


def test_fits_rows_and_widths():
    w = torch.empty(2304, 768)
    assert skinny_gemm_fits(torch.empty(1, 768), w) and skinny_gemm_fits(torch.empty(MAX_ROWS, 768), w)
    assert not skinny_gemm_fits(torch.empty(MAX_ROWS + 1, 768), w)
    assert not skinny_gemm_fits(torch.empty(8, 100), torch.empty(50, 100))  # K not a multiple of 64


def test_scratch_keeps_outgrown_partials_and_one_counter_set():
    scratch = SkinnyScratch()
    parts, counters = scratch.get(100, torch.device("cpu"))
    assert parts.numel() >= 100 and counters.dtype == torch.int32 and not counters.any()
    bigger, again = scratch.get(1000, torch.device("cpu"))
    assert bigger.numel() >= 1000 and again is counters
    assert scratch.get(10, torch.device("cpu"))[0] is bigger
    assert any(t is parts for t in scratch._outgrown)  # a graph captured on it may still use it


def test_dispatch_stays_on_torch_off_cuda_and_outside_the_scope():
    lin = torch.nn.Linear(64, 32)
    x = torch.randn(16, 64)
    assert not uses_skinny_gemm(x)
    with small_batch_gemv(8, skinny_max_rows=64):
        assert not uses_skinny_gemm(x)  # CPU
        torch.testing.assert_close(linear(x, lin), lin(x))


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 9, 17, 33, 64])  # BLOCK_M 16, 32 and 64, padded rows in each
@pytest.mark.parametrize(
    "n,k",
    [(2304, 768), (768, 768), (3072, 768), (768, 3072), (1000, 1024), (37, 128), (4096, 1024), (200, 64)],
)  # (200, 64): one slice, no split
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_skinny_gemm_matches_reference(m, n, k, dtype):
    from roseinfer.kernels.skinny_gemm import skinny_gemm_triton

    x, w, b = linear_operands(m, n, k, dtype)
    # two variants a shape (every variant is a compile): bias + GELU as a dependent launch (with nothing before
    # it), and neither, launched plainly
    for bias, gelu, pdl in ((b, True, True), (None, False, False)):
        assert_matches_reference(skinny_gemm_triton(x, w, bias, gelu, pdl=pdl), x, w, bias, gelu)


@pytest.mark.gpu
@pytest.mark.parametrize(
    "config",
    [SkinnyConfig(16, 64, 4), SkinnyConfig(32, 512, 8), SkinnyConfig(128, 128, 8), SkinnyConfig(64, 256, 4)],
)
def test_other_tiles_match_reference_and_leave_the_counters_at_zero(config):
    from roseinfer.kernels.skinny_gemm import skinny_gemm_triton

    g = torch.Generator(device="cuda").manual_seed(7)
    x = _rand(g, 40, 1024, dtype=torch.float16, device="cuda")
    w = _rand(g, 777, 1024, dtype=torch.float16, device="cuda", scale=0.03)
    b = _rand(g, 777, dtype=torch.float16, device="cuda")
    scratch = SkinnyScratch()
    for _ in range(3):  # a counter left off zero would make the next launch's sums wrong
        out = skinny_gemm_triton(x, w, b, gelu=True, config=config, scratch=scratch)
        torch.testing.assert_close(out.float(), gemv_reference(x, w, b, True).float(), atol=1e-2, rtol=1e-2)
    assert not scratch.get(1, x.device)[1].any()


@pytest.mark.gpu
def test_split_k_sums_are_deterministic_and_every_element_written():
    from roseinfer.kernels.skinny_gemm import skinny_gemm_triton

    g = torch.Generator(device="cuda").manual_seed(3)
    x = _rand(g, 64, 3072, dtype=torch.float16, device="cuda")
    w = _rand(g, 768, 3072, dtype=torch.float16, device="cuda", scale=0.02)
    assert 3072 // pick_skinny_config(64, 768, 3072).slice_k > 1  # mlp_proj's shape: split over K
    outs = []
    for _ in range(5):  # the output is fresh each call: poison what the allocator hands back
        torch.full((64, 768), float("nan"), dtype=torch.float16, device="cuda")
        outs.append(skinny_gemm_triton(x, w, None))
    assert torch.isfinite(outs[0]).all()
    assert all(torch.equal(o, outs[0]) for o in outs[1:])  # partials summed in slice order, not arrival order


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [16, 64])
@pytest.mark.parametrize("pdl", [False, True])
def test_chain_in_a_graph_matches_reference(rows, pdl):
    # Dependent launches inside a captured graph: each GEMM reads the one before's output and all share one
    # scratch, so a missing wait or a counter left off zero would read stale partials. Replayed on fresh inputs,
    # compared at every link.
    from roseinfer.bench.timing import captured
    from roseinfer.kernels.pdl import pdl_scope, pdl_supported
    from roseinfer.kernels.skinny_gemm import skinny_gemm_triton

    if pdl and not pdl_supported():
        pytest.skip("PDL needs Hopper or later")
    g = torch.Generator(device="cuda").manual_seed(rows)
    dims = [768, 2304, 768, 3072, 768]  # widths along the chain: split over K and not
    ws = [_rand(g, dims[i + 1], dims[i], dtype=torch.float16, device="cuda", scale=0.05) for i in range(4)]
    bs = [_rand(g, dims[i + 1], dtype=torch.float16, device="cuda", scale=0.1) for i in range(4)]
    x = torch.empty(rows, 768, dtype=torch.float16, device="cuda")
    scratch = SkinnyScratch()

    def chain():
        outs, h = [], x
        with pdl_scope(pdl):
            for i in range(4):
                h = skinny_gemm_triton(h, ws[i], bs[i], gelu=i == 2, scratch=scratch)
                outs.append(h)
        return outs

    x.copy_(_rand(g, rows, 768, dtype=torch.float16, device="cuda"))
    graph, outs = captured(chain)
    for _ in range(3):
        x.copy_(_rand(g, rows, 768, dtype=torch.float16, device="cuda"))
        graph.replay()
        h = x
        for i in range(4):
            ref = gemv_reference(h, ws[i], bs[i], gelu=i == 2)
            torch.testing.assert_close(outs[i].float(), ref.float(), atol=2e-2, rtol=2e-2)
            h = outs[i]  # the next link's reference starts from the kernel's own output


@pytest.mark.gpu
@pytest.mark.parametrize(
    "k,n,expected",
    [
        # c_fc (N > K): the GEMV at 2 rows, not at 8 (`gemv_wins`); the skinny GEMM from 9 to 32 rows
        # (`skinny_wins`)
        (768, 3072, ["gemv", "cublas", "skinny", "cublas", "cublas"]),
        # mlp_proj (N <= K): the GEMV up to 8 rows, the skinny GEMM up to 64
        (3072, 768, ["gemv", "gemv", "skinny", "skinny", "cublas"]),
    ],
)
def test_linear_dispatches_beyond_the_gemv_up_to_the_skinny_rows(monkeypatch, k, n, expected):
    from roseinfer.kernels import gemv, skinny_gemm

    lin = torch.nn.Linear(k, n, device="cuda", dtype=torch.float16)
    calls = []
    real_skinny, real_gemv = skinny_gemm.skinny_gemm_triton, gemv.gemv_triton
    monkeypatch.setattr(
        skinny_gemm, "skinny_gemm_triton", lambda *a, **kw: calls.append("skinny") or real_skinny(*a, **kw)
    )
    monkeypatch.setattr(gemv, "gemv_triton", lambda *a, **kw: calls.append("gemv") or real_gemv(*a, **kw))
    with torch.no_grad(), small_batch_gemv(8, skinny_max_rows=64):
        for rows in (2, 8, 16, 64, 65):
            before = len(calls)
            x = torch.randn(rows, k, device="cuda").half()
            out = linear(x, lin, gelu=True)
            if len(calls) == before:
                calls.append("cublas")
            ref = gemv_reference(x, lin.weight, lin.bias, gelu=True)
            torch.testing.assert_close(out.float(), ref.float(), atol=1e-2, rtol=1e-2)
    assert calls == expected
