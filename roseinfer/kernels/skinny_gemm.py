"""Skinny GEMM on tensor cores: out = act(x @ W^T + b) for a few to 64 rows (the engine: decode buckets 4 to 32).

At batch 64 on the H100 cuBLAS took 4.3 to 5.1 us for each of a GPT-2 small block's linears (1.2 to 4.7 MB of
weights, 0.4 to 1.6 us at the copy bandwidth) and a 2.4 us split-K reduce kernel after attn_proj (docs/
BENCHMARKS.md, issue 27): 48 GEMMs a step, a third of it. At 64 rows a linear is still a weight stream, but the
arithmetic (64 FMAs per weight) needs tensor cores, which the GEMV (`roseinfer.kernels.gemv`, CUDA cores) does
not use. This kernel is the GEMV's shape on tensor cores:
- a program owns BLOCK_N output columns (rows of W [N, K], K contiguous) and one SLICE_K-wide slice of K, all
  rows of x at once (BLOCK_M = the rows padded to 16..64): enough programs to keep the SMs loading (c_attn at
  64 columns a program and 3 slices: 108), and no two programs read the same weight byte;
- launched with PDL (`roseinfer.kernels.pdl`), each program loads its weight slice before it waits, i.e. while the
  kernel before it still runs; after the wait it reads its x slice from L2 and multiplies once (`tl.dot`);
- with more than one slice the partial products meet in the kernel: each program stores its fp32 partial to a
  scratch buffer and counts itself in on its column tile's counter; the last one in sums the partials (in slice
  order: deterministic), adds the bias, applies GELU for c_fc, writes the output and sets the counter back to
  zero for the next launch. No reduce kernel, no atomics on the data.

`gemv_reference` (`roseinfer.kernels.gemv`) is the torch reference it is tested against (same contract).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

# Rows this kernel takes: tl.dot needs at least 16 (fewer are padded), and above 64 the x tile of a program
# outgrows its registers.
MAX_ROWS = 64
# Column tiles a scratch's counters cover (GPT-2 xl's c_fc at 16 columns a program: 400)
MAX_TILES = 4096


@dataclass(frozen=True)
class SkinnyConfig:
    block_n: int  # output columns (rows of W) per program
    slice_k: int  # K per program (a power of two dividing K); K // slice_k programs share a column tile
    num_warps: int


def pick_skinny_config(m: int, n: int, k: int) -> SkinnyConfig:
    """The hand-picked tile (scripts/bench_gemv.py --skinny --sweep, under PDL on the H100 at 16, 32 and 64 rows):
    slices of 256 (K up to 1,024) or 512, as K allows (the best slice for every GPT-2 small linear at every row
    count: more slices cost more partials to sum, fewer leave SMs idle); 64 output columns a program from 2,048
    columns, else 32; 8 warps for tiles of 16,384 weights or more. Within 5% of the sweep's best for c_attn,
    attn_proj and c_fc at 16 and 32 rows, and mlp_proj at 16 (at 32, 4%; its best, 64 columns, was 2% slower at 16)."""
    slice_k = 256 if k <= 1024 else 512
    while slice_k > 64 and k % slice_k:
        slice_k //= 2
    block_n = 64 if n >= 2048 else 32
    return SkinnyConfig(block_n, slice_k, num_warps=8 if block_n * slice_k >= 16384 else 4)


def skinny_gemm_fits(x: torch.Tensor, weight: torch.Tensor) -> bool:
    """Shapes the kernel takes: 1 to MAX_ROWS rows, K a multiple of 64 (the slices are powers of two that divide
    it; every GPT-2 width is), and N small enough for one scratch's counters."""
    m, k = x.shape
    n = weight.shape[0]
    return 0 < m <= MAX_ROWS and k % 64 == 0 and -(-n // 16) <= MAX_TILES


class SkinnyScratch:
    """The partial products and the column tiles' counters of the kernel's split-K, per device. Every launch leaves
    its counters at zero, so launches on one stream can share a scratch; two streams that run launches at the same
    time need one each (the captured decode step owns one: `roseinfer.cuda_graphs`). Made outside a graph capture
    (the engine's warm-up forward runs first), so the zeroed counters are not a node of the graph."""

    def __init__(self) -> None:
        self._parts: dict[torch.device, torch.Tensor] = {}
        self._counters: dict[torch.device, torch.Tensor] = {}
        # partials outgrown: kept, since a captured graph may still read and write them
        self._outgrown: list[torch.Tensor] = []

    @property
    def used(self) -> bool:
        """Whether any launch has asked for this scratch (a test's check that the kernel ran)."""
        return bool(self._counters)

    def get(self, numel: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(partials, at least `numel` fp32; counters [MAX_TILES] int32, all zero between launches)."""
        if device not in self._counters:
            self._counters[device] = torch.zeros(MAX_TILES, dtype=torch.int32, device=device)
        parts = self._parts.get(device)
        if parts is None or parts.numel() < numel:
            if parts is not None:
                self._outgrown.append(parts)
            self._parts[device] = torch.empty(numel, dtype=torch.float32, device=device)
        return self._parts[device], self._counters[device]


_DEFAULT_SCRATCH = SkinnyScratch()


@functools.cache
def _get_kernel():
    """The kernel, compiled on first use: importing this module needs no Triton (the CPU engine never calls it)."""
    import triton
    import triton.language as tl

    from roseinfer.kernels.pdl import gdc_functions

    gdc_wait, gdc_launch_dependents = gdc_functions()

    @triton.jit
    def epilogue(acc, b_ptr, out_ptr, rm, rn, M, N, stride_om, HAS_BIAS: tl.constexpr, GELU: tl.constexpr):
        nmask = rn < N
        if HAS_BIAS:
            acc += tl.load(b_ptr + rn, mask=nmask, other=0.0).to(tl.float32)[None, :]
        if GELU:  # GPT-2's gelu_new, as the GEMV's epilogue: tanh(u) = 1 - 2 / (e^2u + 1)
            u = 0.7978845608028654 * (acc + 0.044715 * acc * acc * acc)
            acc = 0.5 * acc * (2.0 - 2.0 / (tl.exp(2.0 * u) + 1.0))
        o_ptrs = out_ptr + rm[:, None] * stride_om + rn[None, :]
        tl.store(o_ptrs, acc.to(out_ptr.dtype.element_ty), mask=(rm < M)[:, None] & nmask[None, :])

    @triton.jit
    def skinny_gemm_kernel(
        x_ptr, w_ptr, b_ptr, out_ptr, part_ptr, cnt_ptr, M, N, stride_xm, stride_wn, stride_om,
        HAS_BIAS: tl.constexpr, GELU: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        SLICE_K: tl.constexpr, SPLIT_K: tl.constexpr, PDL: tl.constexpr,
    ):  # fmt: skip
        pid_n = tl.program_id(0)
        pid_k = tl.program_id(1)
        rm = tl.arange(0, BLOCK_M)  # [BM]
        rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
        rk = pid_k * SLICE_K + tl.arange(0, SLICE_K)  # [SK]: K is a multiple of SLICE_K, no mask
        nmask = rn < N
        # weights: not written by the step, so loaded before the wait (with PDL, while the kernel before runs)
        w = tl.load(
            w_ptr + rn.to(tl.int64)[:, None] * stride_wn + rk[None, :], mask=nmask[:, None], other=0.0
        )
        if PDL:  # x is the previous kernel's output
            gdc_wait()
            gdc_launch_dependents()
        x = tl.load(
            x_ptr + rm[:, None] * stride_xm + rk[None, :], mask=(rm < M)[:, None], other=0.0
        )  # [BM, SK]
        acc = tl.dot(x, tl.trans(w))  # [BM, BN] fp32
        if SPLIT_K == 1:
            epilogue(acc, b_ptr, out_ptr, rm, rn, M, N, stride_om, HAS_BIAS, GELU)
        else:
            # partials [SPLIT_K, BM, N]: this program's [BM, BN] block, then one release-acquire arrival per
            # program (after bar.sync: every thread's stores are issued before it)
            tile = (rm[:, None] * N + rn[None, :]).to(tl.int64)  # [BM, BN]
            stride_s = BLOCK_M * N
            tl.store(part_ptr + pid_k * stride_s + tile, acc, mask=nmask[None, :])
            tl.debug_barrier()
            arrived = tl.atomic_add(cnt_ptr + pid_n, 1, sem="acq_rel")
            if arrived == SPLIT_K - 1:  # the last program of the tile: sum in slice order (deterministic)
                total = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
                for s in tl.static_range(SPLIT_K):
                    # .cg: from L2, where the other programs' stores are (L1 is not coherent)
                    total += tl.load(
                        part_ptr + s * stride_s + tile, mask=nmask[None, :], cache_modifier=".cg"
                    )
                tl.store(cnt_ptr + pid_n, 0)  # zero for the next launch (which waits for this one to finish)
                epilogue(total, b_ptr, out_ptr, rm, rn, M, N, stride_om, HAS_BIAS, GELU)

    return skinny_gemm_kernel


def skinny_gemm_triton(
    x, weight, bias=None, gelu: bool = False, config: SkinnyConfig | None = None, pdl: bool | None = None,
    scratch: SkinnyScratch | None = None,
):  # fmt: skip
    """Same contract as `roseinfer.kernels.gemv.gemv_reference` (x [M, K] -> [M, N]), for shapes that
    `skinny_gemm_fits`. x rows may be strided (last dimension contiguous); weight contiguous. pdl: launch as a
    programmatic dependent launch (None: as the current scope says). scratch: the split-K buffers (None: one per
    process; see `SkinnyScratch` for when a caller needs its own)."""
    from roseinfer.kernels.gemv import triton_next_pow2
    from roseinfer.kernels.pdl import pdl_enabled, pdl_supported

    m, k = x.shape
    n = weight.shape[0]
    assert (
        skinny_gemm_fits(x, weight) and weight.shape[1] == k and x.stride(1) == 1 and weight.is_contiguous()
    )
    assert bias is None or (bias.shape == (n,) and bias.is_contiguous())
    cfg = config or pick_skinny_config(m, n, k)
    assert k % cfg.slice_k == 0 and -(-n // cfg.block_n) <= MAX_TILES
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)  # [M, N]
    if n == 0:
        return out
    block_m = max(16, triton_next_pow2(m))
    split_k = k // cfg.slice_k
    parts, counters = (scratch or _DEFAULT_SCRATCH).get(split_k * block_m * n if split_k > 1 else 1, x.device)
    pdl = (pdl_enabled() if pdl is None else pdl) and pdl_supported()
    _get_kernel()[(-(-n // cfg.block_n), split_k)](
        x, weight, bias if bias is not None else weight, out, parts, counters, m, n, x.stride(0),
        weight.stride(0), out.stride(0),
        HAS_BIAS=bias is not None, GELU=gelu, BLOCK_M=block_m, BLOCK_N=cfg.block_n, SLICE_K=cfg.slice_k,
        SPLIT_K=split_k, PDL=pdl, num_warps=cfg.num_warps, launch_pdl=pdl,
    )  # fmt: skip
    return out
