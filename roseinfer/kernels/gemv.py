"""Small-batch linear layer (GEMV up to a skinny GEMM): out = act(x @ W^T + b) for a handful of rows.

At decode batch 1 a GPT-2 small layer's four linears read 14.2 MB of weights (4.8 us at the H100's copy
bandwidth), but cuBLAS took 4.3 to 4.9 us for each of them, plus a 1.9 us split-K reduce kernel for some
(docs/BENCHMARKS.md, issue 27): at M = 1 its tiles are shaped for a matrix product, most of each tile is padding,
and too few bytes are in flight. This kernel is shaped for the weight stream instead:
- each program owns BLOCK_N output columns, i.e. BLOCK_N whole rows of W [N, K] (nn.Linear's layout, K
  contiguous), and walks K in BLOCK_K slices: every load of W is a contiguous run of 16-byte vectors, and no two
  programs read the same weight byte;
- BLOCK_N is small (2 to 16), so even a 768-wide output makes hundreds of programs, all resident at once on
  132 SMs: enough loads in flight without splitting K, so there is no reduce kernel and no atomics;
- the x rows (at most BLOCK_M, padded to a power of two) are re-read from L2 by every program, which is free
  next to the weights;
- the partial products stay in a [BLOCK_M, BLOCK_N, BLOCK_K] fp32 accumulator, reduced over K once at the end
  (one cross-lane reduction per program, not one per slice);
- the epilogue adds the bias and, for c_fc, applies GPT-2's tanh GELU, so the linear is one kernel;
- at one row an optional prologue adds the residual and applies the LayerNorm in front of c_attn / c_fc
  (`roseinfer.kernels.norm_gemv`), so the add + LayerNorm kernel before them goes too; in front of the first
  block's c_attn it can also gather its two rows from the embedding tables (`norm_gemv_triton(index=)`), so the two
  embedding kernels go as well;
- launched with PDL (`roseinfer.kernels.pdl`), a one-row call takes a one-shot tile: every program loads all of its
  weights before it waits for x, i.e. while the kernel before it still runs (on the H100, c_attn at one row: 2.7 us
  in a chain of PDL launches against 3.7 us plain and 5.1 us for cuBLAS; scripts/bench_gemv.py).

The arithmetic is on CUDA cores (fp32 FMAs), one per weight element per row: fine while M is small (at M = 8 that
is ~12 TFMA/s to keep up with 3 TB/s of fp16 weights), which is why the engine uses it only for small batch
buckets (`roseinfer.linears`). `gemv_reference` is the plain-torch version the kernel is tested against.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F


def gemv_reference(x, weight, bias=None, gelu: bool = False):
    """x [M, K], weight [N, K], bias [N] or None. Returns act(x @ weight^T + bias) [M, N] in x's dtype, computed
    in fp32 (the kernel accumulates in fp32 and rounds once)."""
    out = F.linear(x.float(), weight.float(), None if bias is None else bias.float())  # [M, N]
    if gelu:
        out = F.gelu(out, approximate="tanh")
    return out.to(x.dtype)


# The fused all-reduce's reader (`roseinfer.kernels.norm_gemv.norm_gemv_triton(.., wait=)`) is this kernel, and
# where its regions are recorded (`roseinfer.fused_allreduce.ReaderStamps`) each program writes NSTAMP %globaltimer
# stamps: its start, the kernel in front completed (its PDL wait), every rank's row arrived, its output stored
ALLREDUCE_KERNEL = "allreduce_gemv_kernel"
NSTAMP = 4

# The widest K a one-shot tile (every weight of a program loaded at once) takes, and so the widest row the norm
# prologue (which exists for that tile only) normalises
ONE_SHOT_MAX_K = 4096


@dataclass(frozen=True)
class GemvConfig:
    block_n: int  # output columns (rows of W) per program
    block_k: int  # K slice per loop iteration
    num_warps: int
    num_stages: int  # software pipelining of the K loop (next slices' loads in flight)
    one_shot: bool = False  # one row only, block_k >= K: no loop, every weight load issued at once


def pick_config(m: int, n: int, k: int, pdl: bool = False) -> GemvConfig:
    """The hand-picked tile for an [m, k] x [k, n] product (scripts/bench_gemv.py sweeps the alternatives).

    With PDL, one row (batch 1) and K up to 4,096: one shot, BLOCK_K covering K, two output columns per program
    (the sweep's best at one row on the H100 was block_n 2 for all four of GPT-2 small's linears): each program
    issues every load of its weights at once, before it waits for x, while the kernel before still runs. Without
    PDL the K loop was faster at one row (c_attn 3.7 against 4.2 us on the H100).
    Otherwise a K loop, aiming at ~3+ programs per SM of the H100's 132 (all resident at once: a program holds
    little), 16-byte loads, and an accumulator of at most 32 fp32 registers per thread."""
    if pdl and m == 1 and k <= ONE_SHOT_MAX_K:
        block_k = triton_next_pow2(k)
        return GemvConfig(2, block_k, num_warps=2 if block_k <= 1024 else 4, num_stages=1, one_shot=True)
    block_m = max(1, triton_next_pow2(m))
    block_n = 16
    while block_n > 2 and -(-n // block_n) < 400:
        block_n //= 2
    num_warps = 4
    # [BLOCK_M, BLOCK_N, BLOCK_K] fp32 accumulator over 32 * num_warps threads: at most 32 registers per thread;
    # a slice that divides K, where one does, so that no lanes load padding
    block_k = 512
    while block_k > 64 and (block_m * block_n * block_k > 32 * 32 * num_warps or k % block_k):
        block_k //= 2
    return GemvConfig(block_n, block_k, num_warps, num_stages=3)


def triton_next_pow2(v: int) -> int:
    return 1 if v <= 1 else 2 ** math.ceil(math.log2(v))


@functools.cache
def gemv_kernels():
    """(gemv_kernel, allreduce_gemv_kernel), compiled on first use: importing this module needs no Triton (the CPU
    engine never calls it)."""
    import triton
    import triton.language as tl

    from roseinfer.kernels.pdl import gdc_functions

    gdc_wait, gdc_launch_dependents = gdc_functions()

    from triton.language.extra.cuda import globaltimer

    @triton.jit
    def trap():  # the fused all-reduce's wait gave up: the kernel ends with an error the host sees (a dead rank)
        tl.inline_asm_elementwise("trap; mov.u32 $0, 0;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)

    # st.relaxed.sys: a strong 8-byte store, which the PTX memory model promises to arrive whole
    @triton.jit
    def store_sys(ptr, value, mask):
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.b32 p, $3, 0; @p st.relaxed.sys.global.b64 [$1], $2; mov.u32 $0, 0; }",
            "=r,l,l,r",
            [ptr.to(tl.int64, bitcast=True), value, mask.to(tl.int32)],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )

    @triton.jit
    def gemv_program(
        pid, x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
        d_ptr, lnw_ptr, lnb_ptr, s_ptr, eps, xi_ptr, di_ptr, stride_dm,
        row_addrs_ptr, row_off, rank, timeout_ns, stamp_ptr, stamp_stride, best_ptr, n_valid,
        HAS_BIAS, GELU, BLOCK_M, BLOCK_N,
        BLOCK_K, STAGES, ONE_SHOT, PDL,
        NORM, EARLY, GATHER, DELTA_ROWS,
        PUSH, WAIT, STAMPS, ARGMAX,
    ):  # fmt: skip
        # a fused all-reduce reader's regions (`roseinfer.fused_allreduce.ReaderStamps`): its start
        if STAMPS:
            tl.store(stamp_ptr + pid, globaltimer())
        if PUSH:  # the epoch of this program's words: their last one in this rank's own row, plus one. The
            # kernel itself wrote them a step ago (not the kernel in front), so read now, beside the weights
            own = tl.load(row_addrs_ptr + rank).to(tl.pointer_type(tl.int64)) + row_off
            epoch = (tl.load(own + pid * (BLOCK_N // 2), volatile=True) >> 32) + 1
        rm = tl.arange(0, BLOCK_M)  # [BM]
        rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
        rk = tl.arange(0, BLOCK_K)  # [BK]
        mmask = rm < M
        nmask = rn < N
        w_rows = w_ptr + rn.to(tl.int64)[:, None] * stride_wn  # [BN, 1]
        x_rows = x_ptr + rm[:, None] * stride_xm  # [BM, 1]
        if ONE_SHOT:  # one row, BLOCK_K >= K: all of this program's weights loaded at once, before the wait
            if PDL and EARLY:  # the next kernel may start now: it too reads only weights before its wait
                gdc_launch_dependents()
            kk = rk
            kmask = kk < K
            w = tl.load(w_rows + kk[None, :], mask=nmask[:, None] & kmask[None, :], other=0.0)  # [BN, BK]
            if NORM:  # LayerNorm's parameters: not written by the step, loaded before the wait too
                lnw = tl.load(lnw_ptr + kk, mask=kmask, other=0.0).to(tl.float32)  # [BK]
                lnb = tl.load(lnb_ptr + kk, mask=kmask, other=0.0).to(tl.float32)
            if GATHER:  # x and delta are rows of the embedding tables (weights) at the step's token id and
                # position (its inputs, staged before its first kernel): all read before the wait
                xr = tl.load(x_ptr + tl.load(xi_ptr).to(tl.int64) * stride_xm + kk, mask=kmask, other=0.0)
                dr = tl.load(d_ptr + tl.load(di_ptr).to(tl.int64) * stride_dm + kk, mask=kmask, other=0.0)
            if PDL:  # the weights are in flight; x is the previous kernel's output
                gdc_wait()
                if not EARLY:
                    gdc_launch_dependents()
            if STAMPS:  # the kernel in front (this rank's producer) has completed
                tl.store(stamp_ptr + stamp_stride + pid, globaltimer())
            if WAIT:
                # delta is a fused all-reduce's words [WAIT, ceil(K / 2)] (`roseinfer.fused_allreduce`): two values
                # and the step's epoch each. Every rank's row is read until all its words carry the epoch this
                # rank's own producer (the kernel in front, complete after the wait above) wrote. Loads are
                # volatile: past L1, which another GPU's stores do not update.
                kw = (K + 1) // 2
                wk = tl.arange(0, BLOCK_K // 2)  # [BK / 2] words
                wmask = wk < kw
                epoch = tl.load(d_ptr + rank * kw, volatile=True) >> 32
                start = globaltimer()
                lo = tl.zeros([BLOCK_K // 2], dtype=tl.float32)  # columns 2i
                hi = tl.zeros([BLOCK_K // 2], dtype=tl.float32)  # columns 2i + 1
                for r in tl.static_range(WAIT):
                    words = tl.load(d_ptr + r * kw + wk, mask=wmask, other=0, volatile=True)
                    while tl.sum((wmask & ((words >> 32) != epoch)).to(tl.int32), 0) > 0:
                        if globaltimer() - start > timeout_ns:
                            trap()
                        words = tl.load(d_ptr + r * kw + wk, mask=wmask, other=0, volatile=True)
                    # summed in rank order (the same values in the same order on every rank: the same bits)
                    lo += (
                        (words & 0xFFFF).to(tl.uint16).to(s_ptr.dtype.element_ty, bitcast=True).to(tl.float32)
                    )
                    hi += (
                        ((words >> 16) & 0xFFFF)
                        .to(tl.uint16)
                        .to(s_ptr.dtype.element_ty, bitcast=True)
                        .to(tl.float32)
                    )
                if STAMPS:  # every rank's row has arrived
                    tl.store(stamp_ptr + 2 * stamp_stride + pid, globaltimer())
                # rounded to the activation dtype, as NCCL's reduction of two ranks rounds a + b
                lo = lo.to(s_ptr.dtype.element_ty).to(tl.float32)
                hi = hi.to(s_ptr.dtype.element_ty).to(tl.float32)
                dr = tl.reshape(tl.join(lo, hi), [BLOCK_K])
            if NORM:  # prologue: s = x + delta (the residual stream; program 0 stores it), x1 = LayerNorm(s)
                if not GATHER:
                    xr = tl.load(x_ptr + kk, mask=kmask, other=0.0)
                    if not WAIT:
                        dr = tl.load(d_ptr + kk, mask=kmask, other=0.0)
                        # a split sum [DELTA_ROWS, K] (roseinfer.kernels.split_sum): its rows added
                        for r in tl.static_range(1, DELTA_ROWS):
                            dr += tl.load(d_ptr + r * K + kk, mask=kmask, other=0.0)
                # rounded to the activation dtype like torch's add
                sr = (xr.to(tl.float32) + dr.to(tl.float32)).to(s_ptr.dtype.element_ty)
                tl.store(s_ptr + kk, sr, mask=kmask & (pid == 0))
                sf = sr.to(tl.float32)
                mean = tl.sum(sf, 0) / K
                diff = tl.where(kmask, sf - mean, 0.0)
                rstd = 1.0 / tl.sqrt(tl.sum(diff * diff, 0) / K + eps)
                # rounded to the activation dtype, as the add + LayerNorm kernel's output the GEMV would read
                x1 = (diff * rstd * lnw + lnb).to(s_ptr.dtype.element_ty)  # [BK]
            else:
                x1 = tl.load(x_ptr + kk, mask=kmask, other=0.0)  # [BK]
            out = tl.sum(w.to(tl.float32) * x1.to(tl.float32)[None, :], axis=1)[None, :]  # [1, BN]
        elif BLOCK_M == 1:  # one row, K in slices: a 2-D accumulator, no broadcast over rows
            if PDL:
                gdc_wait()
                gdc_launch_dependents()
            acc1 = tl.zeros([BLOCK_N, BLOCK_K], dtype=tl.float32)
            for k0 in tl.range(0, K, BLOCK_K, num_stages=STAGES):
                kk = k0 + rk
                kmask = kk < K
                w = tl.load(w_rows + kk[None, :], mask=nmask[:, None] & kmask[None, :], other=0.0)  # [BN, BK]
                x1 = tl.load(x_ptr + kk, mask=kmask, other=0.0)  # [BK]
                acc1 += w.to(tl.float32) * x1.to(tl.float32)[None, :]
            out = tl.sum(acc1, axis=1)[None, :]  # [1, BN]
        else:
            if PDL:
                gdc_wait()
                gdc_launch_dependents()
            acc = tl.zeros([BLOCK_M, BLOCK_N, BLOCK_K], dtype=tl.float32)
            for k0 in tl.range(0, K, BLOCK_K, num_stages=STAGES):
                kk = k0 + rk
                kmask = kk < K
                w = tl.load(w_rows + kk[None, :], mask=nmask[:, None] & kmask[None, :], other=0.0)  # [BN, BK]
                x = tl.load(x_rows + kk[None, :], mask=mmask[:, None] & kmask[None, :], other=0.0)  # [BM, BK]
                acc += x.to(tl.float32)[:, None, :] * w.to(tl.float32)[None, :, :]
            out = tl.sum(acc, axis=2)  # [BM, BN]
        if HAS_BIAS:
            out += tl.load(b_ptr + rn, mask=nmask, other=0.0).to(tl.float32)[None, :]
        if GELU:
            # GPT-2's gelu_new: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), with tanh(u) = 1 - 2/(e^2u + 1)
            u = 0.7978845608028654 * (out + 0.044715 * out * out * out)
            out = 0.5 * out * (2.0 - 2.0 / (tl.exp(2.0 * u) + 1.0))
        if PUSH:
            # A fused all-reduce's producer (one row): this program's columns of the partial sum, rounded to x's
            # dtype, two to an 8-byte word with the step's epoch, into this rank's row of the slot in every rank's
            # buffer (the others' over NVLink). A reader sees all of a word or none of it: the PTX memory model
            # promises single-copy atomicity to a strong aligned 8-byte store (st.relaxed.sys; NCCL's LL protocol
            # stores with st.volatile). A plain st.global.b64 measured the same (docs/BENCHMARKS.md, session 40).
            wi = pid * (BLOCK_N // 2) + tl.arange(0, BLOCK_N // 2)  # [BN / 2] this program's words
            lo, hi = tl.split(tl.reshape(out.to(x_ptr.dtype.element_ty), [BLOCK_N // 2, 2]))
            lo = lo.to(tl.uint16, bitcast=True).to(tl.int64)
            hi = hi.to(tl.uint16, bitcast=True).to(tl.int64)
            word = lo | (hi << 16) | (epoch << 32)
            for r in tl.static_range(PUSH):
                rows = tl.load(row_addrs_ptr + r).to(tl.pointer_type(tl.int64))
                store_sys(rows + row_off + wi, word, wi < (N + 1) // 2)
        else:
            o_ptrs = out_ptr + rm[:, None] * stride_om + rn[None, :]
            tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=mmask[:, None] & nmask[None, :])
            if ARGMAX:
                # The one-row lm_head's greedy token (`roseinfer.kernels.argmax.LmHeadArgmax`): each logit as stored
                # (rounded to out's dtype) among the first n_valid columns (the vocabulary; the padding columns'
                # zeros must not win), packed with its column so that a larger word is a larger logit, then a lower
                # column (ties go to the first, as torch.argmax's do), and folded into word `column % ARGMAX` by a
                # relaxed atomic max, each by the thread that holds it: a program's own maximum first (one atomic
                # a program) cost a reduction across its warps, and the GEMV 0.5 us more (docs/BENCHMARKS.md,
                # session 61)
                v = out.to(out_ptr.dtype.element_ty).to(tl.float32)  # [1, BN]
                v = tl.where(v == 0.0, 0.0, v)  # -0.0 as +0.0: equal logits, the first column wins
                bits = v.to(tl.int32, bitcast=True)
                key = tl.where(bits < 0, bits ^ 0x7FFFFFFF, bits)  # ordered as the floats, +-inf included
                # every NaN above every number, all equal: the first NaN wins, as in torch.argmax
                key = tl.where(v != v, 0x7FFFFFFF, key).to(tl.int64)
                word = (key << 32) | (4294967295 - rn.to(tl.int64)[None, :])  # [1, BN]
                words = best_ptr + (rn % ARGMAX)[None, :]
                tl.atomic_max(words, word, mask=(rn < n_valid)[None, :], sem="relaxed", scope="gpu")
        if STAMPS:  # its output stored
            tl.store(stamp_ptr + 3 * stamp_stride + pid, globaltimer())

    @triton.jit
    def gemv_kernel(
        x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
        d_ptr, lnw_ptr, lnb_ptr, s_ptr, eps, xi_ptr, di_ptr, stride_dm,
        row_addrs_ptr, row_off, rank, timeout_ns, stamp_ptr, stamp_stride, best_ptr, n_valid,
        HAS_BIAS: tl.constexpr, GELU: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr, STAGES: tl.constexpr, ONE_SHOT: tl.constexpr, PDL: tl.constexpr,
        NORM: tl.constexpr, EARLY: tl.constexpr, GATHER: tl.constexpr, DELTA_ROWS: tl.constexpr,
        PUSH: tl.constexpr, WAIT: tl.constexpr, STAMPS: tl.constexpr, ARGMAX: tl.constexpr,
    ):  # fmt: skip
        gemv_program(
            tl.program_id(0), x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
            d_ptr, lnw_ptr, lnb_ptr, s_ptr, eps, xi_ptr, di_ptr, stride_dm,
            row_addrs_ptr, row_off, rank, timeout_ns, stamp_ptr, stamp_stride, best_ptr, n_valid,
            HAS_BIAS, GELU, BLOCK_M, BLOCK_N, BLOCK_K, STAGES, ONE_SHOT, PDL, NORM, EARLY, GATHER, DELTA_ROWS,
            PUSH, WAIT, STAMPS, ARGMAX,
        )  # fmt: skip

    # The fused all-reduce's reader (WAIT) is the same program under a name of its own (ALLREDUCE_KERNEL): a
    # profile tells it from the other GEMVs, and its stamps' lines match its launches only
    @triton.jit
    def allreduce_gemv_kernel(
        x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
        d_ptr, lnw_ptr, lnb_ptr, s_ptr, eps, xi_ptr, di_ptr, stride_dm,
        row_addrs_ptr, row_off, rank, timeout_ns, stamp_ptr, stamp_stride, best_ptr, n_valid,
        HAS_BIAS: tl.constexpr, GELU: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
        BLOCK_K: tl.constexpr, STAGES: tl.constexpr, ONE_SHOT: tl.constexpr, PDL: tl.constexpr,
        NORM: tl.constexpr, EARLY: tl.constexpr, GATHER: tl.constexpr, DELTA_ROWS: tl.constexpr,
        PUSH: tl.constexpr, WAIT: tl.constexpr, STAMPS: tl.constexpr, ARGMAX: tl.constexpr,
    ):  # fmt: skip
        gemv_program(
            tl.program_id(0), x_ptr, w_ptr, b_ptr, out_ptr, M, N, K, stride_xm, stride_wn, stride_om,
            d_ptr, lnw_ptr, lnb_ptr, s_ptr, eps, xi_ptr, di_ptr, stride_dm,
            row_addrs_ptr, row_off, rank, timeout_ns, stamp_ptr, stamp_stride, best_ptr, n_valid,
            HAS_BIAS, GELU, BLOCK_M, BLOCK_N, BLOCK_K, STAGES, ONE_SHOT, PDL, NORM, EARLY, GATHER, DELTA_ROWS,
            PUSH, WAIT, STAMPS, ARGMAX,
        )  # fmt: skip

    return gemv_kernel, allreduce_gemv_kernel


def gemv_triton(
    x,
    weight,
    bias=None,
    gelu: bool = False,
    config: GemvConfig | None = None,
    pdl: bool | None = None,
    push=None,
):
    """Same contract as `gemv_reference`. x rows may be strided (last dimension contiguous); weight contiguous.
    pdl: launch as a programmatic dependent launch (`roseinfer.kernels.pdl`; None: as the current scope says).
    push (one row): a fused all-reduce's slot (`roseinfer.fused_allreduce.PushTarget`): the output goes into this
    rank's row of the slot in every rank's buffer, and the slot's words [W, ceil(N / 2)] int64 (this GPU's buffer)
    are returned; the next norm GEMV (`roseinfer.kernels.norm_gemv.norm_gemv_triton(.., wait=)`) waits for the
    others' rows and sums them."""
    from roseinfer.kernels.pdl import pdl_early_release, pdl_enabled, pdl_supported

    m, k = x.shape
    n = weight.shape[0]
    assert weight.shape[1] == k and x.stride(1) == 1 and weight.is_contiguous()
    assert bias is None or (bias.shape == (n,) and bias.is_contiguous())
    assert push is None or (m == 1 and push.rows.shape[1] == (n + 1) // 2 and push.rows.dtype == torch.int64)
    out = torch.empty(m, n, dtype=x.dtype, device=x.device) if push is None else push.rows  # [M, N] or [W, N]
    if m == 0 or n == 0:
        return out
    pdl = (pdl_enabled() if pdl is None else pdl) and pdl_supported()
    cfg = config or pick_config(m, n, k, pdl)
    assert not cfg.one_shot or (m == 1 and cfg.block_k >= k)
    gemv_kernel, _ = gemv_kernels()
    gemv_kernel[(-(-n // cfg.block_n),)](
        x, weight, bias if bias is not None else weight, out, m, n, k, x.stride(0), weight.stride(0), out.stride(0),
        x, x, x, x, 0.0, x, x, 0,
        *((push.row_addrs, push.row_offset, push.rank) if push is not None else (x, 0, 0)), 0, x, 0, x, 0,
        HAS_BIAS=bias is not None, GELU=gelu, BLOCK_M=triton_next_pow2(m), BLOCK_N=cfg.block_n,
        BLOCK_K=cfg.block_k, STAGES=cfg.num_stages, ONE_SHOT=cfg.one_shot, PDL=pdl, NORM=False,
        EARLY=pdl and pdl_early_release(), GATHER=False, DELTA_ROWS=1,
        PUSH=push.rows.shape[0] if push is not None else 0, WAIT=0, STAMPS=False, ARGMAX=0, num_warps=cfg.num_warps,
        launch_pdl=pdl,
    )  # fmt: skip
    return out
