"""The CUDA cluster GEMM (`roseinfer.cuda_ext.cluster_gemm`): its tile rule on CPU, and on the GPU the kernel against
the GEMV's plain-torch reference over row counts, shapes, dtypes and every tile, the cluster's split-K sum (the same
bits every launch, every element written), and chains of dependent launches in a graph."""

import pytest
import torch

from roseinfer.cuda_ext.cluster_gemm import (
    MAX_ROWS,
    TILES,
    ClusterTile,
    cluster_gemm_fits,
    pick_tile,
    smem_bytes,
    tile_fits,
)
from roseinfer.kernels.gemv import gemv_reference
from tests.roseinfer.test_gemv_kernel import assert_matches_reference, linear_operands

# GPT-2 small's four linears (c_attn, attn_proj, c_fc, mlp_proj), gpt2-medium's and gpt2-xl's, as (N, K)
SHAPES = [
    (2304, 768),
    (768, 768),
    (3072, 768),
    (768, 3072),
    (3072, 1024),
    (4096, 1024),
    (1024, 4096),
    (4800, 1600),
]


@pytest.mark.parametrize(("n", "k"), SHAPES)
def test_every_model_linear_has_a_tile_that_fits(n, k):
    tile = pick_tile(64, n, k)
    assert tile is not None and tile_fits(tile, n, k)
    assert n // tile.bn * tile.splits >= 48  # enough blocks to keep the SMs loading
    assert smem_bytes(tile, k) <= 227 * 1024


def test_tiles_that_do_not_divide_the_shape_do_not_fit():
    assert not tile_fits(ClusterTile(64, 2, 4), 2304 + 32, 768)  # a partial column tile
    assert not tile_fits(ClusterTile(64, 2, 3), 2304, 768)  # 3 blocks do not share 64 rows
    assert not tile_fits(ClusterTile(64, 2, 16), 2304, 768 * 16)  # past a portable cluster
    assert not tile_fits(ClusterTile(64, 4, 4), 2304, 768)  # not built
    assert not tile_fits(ClusterTile(128, 2, 1), 4096, 8192)  # shared memory
    assert pick_tile(64, 50, 768) is None


def test_fits_says_no_off_cuda():
    assert not cluster_gemm_fits(
        torch.empty(64, 768, dtype=torch.float16), torch.empty(768, 768, dtype=torch.float16)
    )


@pytest.mark.gpu
@pytest.mark.parametrize("m", [1, 17, 33, 64])  # rows past M zeros, never stored
@pytest.mark.parametrize(("n", "k"), SHAPES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cluster_gemm_matches_reference(m, n, k, dtype):
    from roseinfer.cuda_ext.cluster_gemm import cluster_gemm, load

    if load() is None:
        pytest.skip("cluster_gemm not built here (needs sm_90 and nvcc)")
    x, w, b = linear_operands(m, n, k, dtype)  # x's rows strided
    assert cluster_gemm_fits(x, w, b)
    for bias, gelu, pdl in ((b, True, True), (None, False, False), (b, False, False)):
        assert_matches_reference(cluster_gemm(x, w, bias, gelu, pdl=pdl), x, w, bias, gelu)


@pytest.mark.gpu
@pytest.mark.parametrize(("bn", "wn"), TILES)
@pytest.mark.parametrize("splits", [1, 2, 4, 8])
def test_every_tile_matches_reference(bn, wn, splits):
    from roseinfer.cuda_ext.cluster_gemm import cluster_gemm, load

    if load() is None:
        pytest.skip("cluster_gemm not built here (needs sm_90 and nvcc)")
    n, k = 768, 256 * splits  # slices of 256
    tile = ClusterTile(bn, wn, splits)
    assert tile_fits(tile, n, k)
    x, w, b = linear_operands(64, n, k, torch.float16)
    assert_matches_reference(cluster_gemm(x, w, b, True, tile), x, w, b, True)


@pytest.mark.gpu
def test_split_k_sums_are_deterministic_and_every_element_written():
    from roseinfer.cuda_ext.cluster_gemm import cluster_gemm, load

    if load() is None:
        pytest.skip("cluster_gemm not built here (needs sm_90 and nvcc)")
    x, w, _ = linear_operands(MAX_ROWS, 768, 3072, torch.float16)
    assert pick_tile(MAX_ROWS, 768, 3072).splits > 1  # mlp_proj's shape: split over K
    outs = []
    for _ in range(5):  # the output is fresh each call: poison what the allocator hands back
        torch.full((MAX_ROWS, 768), float("nan"), dtype=torch.float16, device="cuda")
        outs.append(cluster_gemm(x, w, None))
    assert torch.isfinite(outs[0]).all()
    assert all(torch.equal(o, outs[0]) for o in outs[1:])  # partials summed in slice order


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [40, 64])
@pytest.mark.parametrize("pdl", [False, True])
def test_chain_in_a_graph_matches_reference(rows, pdl):
    # Dependent launches inside a captured graph: each GEMM reads the one before's output, so a block that read
    # its x before its wait returned would read the last replay's. Replayed on fresh inputs, compared at every link.
    from roseinfer.bench.timing import captured
    from roseinfer.cuda_ext.cluster_gemm import cluster_gemm, load
    from roseinfer.kernels.pdl import pdl_scope

    if load() is None:
        pytest.skip("cluster_gemm not built here (needs sm_90 and nvcc)")
    g = torch.Generator(device="cuda").manual_seed(rows)
    dims = [768, 2304, 768, 3072, 768]  # widths along the chain

    def rand(*shape, scale=1.0):
        return (torch.randn(*shape, generator=g, device="cuda") * scale).half()

    ws = [rand(dims[i + 1], dims[i], scale=0.05) for i in range(4)]
    bs = [rand(dims[i + 1], scale=0.1) for i in range(4)]
    x = torch.empty(rows, 768, dtype=torch.float16, device="cuda")

    def chain():
        outs, h = [], x
        with pdl_scope(pdl):
            for i in range(4):
                h = cluster_gemm(h, ws[i], bs[i], gelu=i == 2)
                outs.append(h)
        return outs

    x.copy_(rand(rows, 768))
    graph, outs = captured(chain)
    for _ in range(3):
        x.copy_(rand(rows, 768))
        graph.replay()
        h = x
        for i in range(4):
            ref = gemv_reference(h, ws[i], bs[i], gelu=i == 2)
            torch.testing.assert_close(outs[i].float(), ref.float(), atol=2e-2, rtol=2e-2)
            h = outs[i]  # the next link's reference starts from the kernel's own output
