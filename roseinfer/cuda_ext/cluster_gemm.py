"""The linears of decode buckets of 33 to 64 rows as one CUDA kernel each (`cluster_gemm.cu`): out = act(x @ W^T + b).

At 64 rows a GPT-2 small linear moves 1.2 to 4.7 MB of weights (0.3 to 1.1 us at an H200's copy bandwidth), yet
cuBLAS took 4.7 to 8.5 us for each and the Triton skinny GEMM under PDL 4.0 to 7.4 (docs/BENCHMARKS.md, session
41). The kernel is built for that chain: its weight tile goes into shared memory before it waits for the kernel in
front (a programmatic dependent launch), and the blocks that split a column tile's K form one thread-block cluster
that sums its partial products in distributed shared memory (no scratch, counters, reduce kernel or atomics).
Bias and GPT-2's tanh GELU (c_fc) are in its epilogue. float16 and bfloat16; built at first use where there is a
GPU of sm_90 or later (clusters, griddepcontrol), elsewhere never (`cluster_gemm_fits` says False and the caller
keeps its path).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

NAME = "cluster_gemm"
KERNEL = "cluster_gemm_kernel"  # the CUDA function's name: the profilers' kernel names contain it
MAX_ROWS = 64  # the rows a block multiplies (cluster_gemm.cu's BM)
# Thread-block clusters and griddepcontrol assemble for sm_90 and later only
MIN_ARCH = (9, 0)
# The tiles built (cluster_gemm.cu's instantiations): (output columns a block, warps along them)
TILES = ((32, 1), (32, 2), (64, 1), (64, 2), (128, 2))
# Slices of K, the blocks of a cluster: at most a portable cluster's 8, dividing the 64 rows among them
SPLITS = (1, 2, 4, 8)
# Shared memory a block may take on sm_90 (227 KB)
MAX_SMEM = 227 * 1024
ROW_PAD, PART_PAD = 8, 4  # cluster_gemm.cu's padding (elements a row of x and W; floats a row of the partial)


@dataclass(frozen=True)
class ClusterTile:
    bn: int  # output columns (rows of W) a block
    wn: int  # warps along those columns (4 wn warps a block)
    splits: int  # slices of K, the blocks of one cluster


def smem_bytes(tile: ClusterTile, k: int, elem: int = 2) -> int:
    """A block's shared memory: its weight tile and x's slice (rows padded) and its float32 partial [64, bn]."""
    ks = k // tile.splits
    return (tile.bn + MAX_ROWS) * (ks + ROW_PAD) * elem + MAX_ROWS * (tile.bn + PART_PAD) * 4


def tile_fits(tile: ClusterTile, n: int, k: int) -> bool:
    """Whether the kernel runs this tile on W [N, K]: whole column tiles, whole slices of K a multiple of 32 wide
    (two halves of whole 16-wide steps), 1, 2, 4 or 8 of them, shared memory within a block's."""
    return (
        (tile.bn, tile.wn) in TILES
        and n % tile.bn == 0
        and tile.splits in SPLITS
        and k % tile.splits == 0
        and (k // tile.splits) % 32 == 0
        and smem_bytes(tile, k) <= MAX_SMEM
    )


def pick_tile(m: int, n: int, k: int) -> ClusterTile | None:
    """The tile for x [m, K] @ W [N, K]^T (None: no tile fits). The first rule, before a sweep on the GPU: the
    fewest slices of K that leave a block at most 512 of it (else the narrowest slice), and column tiles that give
    the grid 96 to about 200 blocks."""
    slices = [s for s in SPLITS if k % s == 0 and (k // s) % 32 == 0]
    if not slices:
        return None
    splits = next((s for s in slices if k // s <= 512), slices[-1])
    for bn, wn in ((64, 2), (32, 2), (128, 2)):
        tile = ClusterTile(bn, wn, splits)
        if tile_fits(tile, n, k) and n // bn * splits >= 96:
            return tile
    return next(
        (t for t in (ClusterTile(32, 2, splits), ClusterTile(64, 2, splits)) if tile_fits(t, n, k)), None
    )


@functools.cache
def load():
    """The built extension, or None (`roseinfer.cuda_ext.why_not_built` says why)."""
    from roseinfer import cuda_ext

    return cuda_ext.load(NAME, (), MIN_ARCH)


def cluster_gemm_fits(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> bool:
    """Whether the kernel takes x [M, K] @ weight [N, K]^T (+ bias [N]): CUDA, float16 or bfloat16 throughout, 1 to
    MAX_ROWS rows, x's rows 16-byte aligned (cp.async), a tile for the shape, and the kernel built."""
    if not (x.is_cuda and x.dim() == 2 and x.dtype in (torch.float16, torch.bfloat16)):
        return False
    m, k = x.shape
    if not (0 < m <= MAX_ROWS and x.stride(1) == 1 and x.stride(0) % 8 == 0 and x.data_ptr() % 16 == 0):
        return False
    if not (
        weight.dtype == x.dtype and weight.is_contiguous() and weight.dim() == 2 and weight.shape[1] == k
    ):
        return False
    if weight.data_ptr() % 16:
        return False
    if bias is not None and not (
        bias.dtype == x.dtype and bias.is_contiguous() and bias.shape == weight.shape[:1]
    ):
        return False
    return pick_tile(m, weight.shape[0], k) is not None and load() is not None


def cluster_gemm(
    x, weight, bias=None, gelu: bool = False, tile: ClusterTile | None = None, pdl: bool | None = None
):
    """act(x @ weight^T + bias) [M, N] in x's dtype (callers check `cluster_gemm_fits`; tile: `pick_tile`'s unless
    given). pdl: a programmatic dependent launch (None: as the current scope says, `roseinfer.kernels.pdl`)."""
    from roseinfer.kernels.pdl import pdl_enabled

    m, k = x.shape
    n = weight.shape[0]
    tile = tile or pick_tile(m, n, k)
    assert tile is not None and tile_fits(tile, n, k)
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)  # [M, N]
    empty = torch.empty(0, dtype=x.dtype, device=x.device)
    pdl = pdl_enabled() if pdl is None else pdl
    load().cluster_gemm(
        x, weight, bias if bias is not None else empty, out, gelu, tile.bn, tile.wn, tile.splits, pdl
    )
    return out
