"""The one-row GEMV with an add + LayerNorm prologue (`norm_gemv_triton`): s = x + delta, out = act(LayerNorm(s) @ W^T
+ b) in one kernel, in front of c_attn and c_fc at batch 1 and of the lm_head with ln_f. It is `gemv_kernel`
(`roseinfer.kernels.gemv`) compiled with NORM=True, the one-shot tile: every program normalises the whole row (K up
to 4,096, in L2) before its columns. delta is one row, a float32 split sum of R rows (`roseinfer.kernels.split_sum`),
or with `wait` a fused all-reduce's rows (`roseinfer.fused_allreduce`, read by `allreduce_gemv_kernel`); with
`index` x's and delta's rows are gathered from the embedding tables (wte[token], wpe[position]).
`norm_gemv_reference` is the plain-torch version it is tested against."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from roseinfer.kernels.gemv import (
    NSTAMP,
    ONE_SHOT_MAX_K,
    GemvConfig,
    gemv_kernels,
    gemv_reference,
    pick_config,
    triton_next_pow2,
)
from roseinfer.kernels.split_sum import delta_rows, joined


def norm_gemv_fits(x, weight) -> bool:
    """The add + LayerNorm prologue exists for the one-shot tile only: one row, K up to 4,096."""
    return x.shape[0] == 1 and x.shape[1] <= ONE_SHOT_MAX_K and weight.shape[1] == x.shape[1]


def norm_gemv_reference(
    x, delta, ln_weight, ln_bias, eps: float, weight, bias=None, gelu: bool = False, index=None
):
    """(s, out): s = x + delta, out = act(LayerNorm(s) @ weight^T + bias), LayerNorm's output rounded to x's
    dtype as the unfused add + LayerNorm kernel writes it. x, delta [1, K] (or delta a float32 split sum [R, K],
    `roseinfer.kernels.split_sum`) -> s [1, K], out [1, N]. index: (xi,
    di), each [1] integer: x and delta are tables [*, K] and the rows are x[xi] and delta[di]."""
    if index is not None:
        x, delta = x[index[0]], delta[index[1]]  # [1, K] each
    s = x + joined(x, delta)
    h = F.layer_norm(s.float(), (s.shape[-1],), ln_weight.float(), ln_bias.float(), eps).to(x.dtype)
    return s, gemv_reference(h, weight, bias, gelu)


# From this many output columns (the lm_head's vocabulary) the one-row norm GEMV takes wider programs: each
# program normalises the whole row before its columns, and at 2 columns a program the lm_head's 25,152 programs
# read 77 MB of x and delta from L2, as many bytes as its weights
NORM_WIDE_FROM = 16384
# Likewise for rows wider than this (gpt2-medium, -large and -xl; GPT-2 small keeps the sweep's 2 columns): at
# 1,600 wide the re-read row is a third of a program's bytes at 2 columns. At batch 1 (docs/BENCHMARKS.md), ms a
# token at 2 / 8 / 16 columns: gpt2-xl on two H200s (session 39) TP=1 2.077 / 2.053 / 2.082, TP=2 on NCCL 1.743 /
# 1.644 / -, TP=2 with the fused all-reduce 1.787 / 1.292 / 1.154; on one H200 (session 40) gpt2-large 1.135 /
# 1.042 / -, gpt2-medium 0.4374 / 0.4146 / -. The fused all-reduce's delta is 4 bytes a column a rank (2 for a plain
# one), so its readers take 16 columns, the rest 8.
NORM_WIDE_ROWS_ABOVE = 768


def pick_norm_config(n: int, k: int, fused_rows: bool = False) -> GemvConfig:
    """The one-shot tile of `norm_gemv_triton` (K up to 4,096, `norm_gemv_fits`): `pick_config`'s one-row tile under
    PDL (2 output columns a program, the sweep's best for a block's linears), 8 columns from NORM_WIDE_FROM
    (scripts/bench_gemv.py --linears lm_head --sweep-pdl), and for rows wider than NORM_WIDE_ROWS_ABOVE 8 columns,
    16 where the delta is a fused all-reduce's rows (`fused_rows`)."""
    block_k = triton_next_pow2(k)
    if n >= NORM_WIDE_FROM:
        return GemvConfig(8, block_k, num_warps=4 if block_k <= 1024 else 8, num_stages=1, one_shot=True)
    if k > NORM_WIDE_ROWS_ABOVE:
        # The one-shot tile holds its weights in registers, at most 128 values a thread (compiled for sm_90: 8 x
        # 2,048 on 4 warps 246 registers, 16 x 2,048 on 8 200, 8 x 4,096 on 8 233, 8 x 1,024 on 4 119, 16 x 1,024 on
        # 4 195, none spilling); 16 x 4,096 would take 16 warps, whose 128 registers a thread spill
        wide = 16 if fused_rows and block_k <= 2048 else 8
        warps = max(4, wide * block_k // (32 * 128))
        return GemvConfig(wide, block_k, num_warps=warps, num_stages=1, one_shot=True)
    return pick_config(1, n, k, pdl=True)


def norm_gemv_triton(
    x, delta, ln_weight, ln_bias, eps: float, weight, bias=None, gelu: bool = False, pdl=None, index=None,
    config: GemvConfig | None = None, wait=None, argmax=None,
):  # fmt: skip
    """Same contract as `norm_gemv_reference`, one kernel: every program recomputes the row's LayerNorm (the row
    is K <= 4,096 wide and in L2) before its GEMV, and program 0 writes s. Replaces the add + LayerNorm kernel
    in front of c_attn and c_fc at batch 1 (`roseinfer.linears.norm_linear`), and ln_f's in front of the lm_head;
    with `index` (the step's token id and position, [1] each, read before the wait like the tables' rows) also
    the two embedding lookups in front of the first block's c_attn. config: the tile (`pick_norm_config`).
    wait: delta is a fused all-reduce's words [W, ceil(K / 2)] int64 that the kernel in front pushed
    (`roseinfer.fused_allreduce.PushedRows`): the prologue waits for every rank's row, then adds them in rank
    order. argmax: (words, n_valid), words int64 [W] (`roseinfer.kernels.argmax.LmHeadArgmax`): every logit of the
    first n_valid columns is also folded with its column into word `column % W` by an atomic max, which
    `argmax_words` then reads (the greedy token with no pass over the logits)."""
    from roseinfer.kernels.pdl import pdl_early_release, pdl_enabled, pdl_supported

    gather = index is not None
    if gather:
        xi, di = index
        assert xi.numel() == 1 and di.numel() == 1 and delta.shape[1] == x.shape[1]
        d_stride = delta.stride(0)  # the position table's rows (x's is x.stride(0), passed as for one row)
        x, delta = x[:1], delta[:1]  # the shapes of one row; the kernel reads the indexed rows
    m, k = x.shape
    n = weight.shape[0]
    # 1, or a split sum's rows (contiguous: row r at r * K), or a fused all-reduce's ranks (rows of ceil(K / 2) words)
    rows = delta_rows(x, delta) if wait is None else delta.shape[0]
    assert wait is None or (
        not gather and delta.dtype == torch.int64 and delta.shape == (rows, (x.shape[1] + 1) // 2)
    )
    assert norm_gemv_fits(x, weight) and rows and x.stride(1) == 1 and delta.stride(1) == 1
    assert rows == 1 or delta.is_contiguous()
    assert weight.is_contiguous() and ln_weight.is_contiguous() and ln_bias.is_contiguous()
    assert bias is None or (bias.shape == (n,) and bias.is_contiguous())
    s = torch.empty(1, k, dtype=x.dtype, device=x.device)  # [1, K]
    out = torch.empty(m, n, dtype=x.dtype, device=x.device)  # [1, N]
    pdl = (pdl_enabled() if pdl is None else pdl) and pdl_supported()
    cfg = config or pick_norm_config(n, k, fused_rows=wait is not None)
    assert cfg.one_shot and cfg.block_k >= k
    programs = -(-n // cfg.block_n)
    # a fused all-reduce's reader: its own kernel name, and its stamps [NSTAMP, programs] (stride(0) apart) where
    # its regions are recorded
    stamps = wait.stamps if wait is not None else None
    assert stamps is None or (stamps.shape == (NSTAMP, programs) and stamps.stride(1) == 1)
    if argmax is not None:
        words, n_valid = argmax
        assert words.dtype == torch.int64 and words.dim() == 1 and words.is_contiguous() and 0 < n_valid <= n
    gemv_kernel, allreduce_gemv_kernel = gemv_kernels()
    (gemv_kernel if wait is None else allreduce_gemv_kernel)[(programs,)](
        x, weight, bias if bias is not None else weight, out, m, n, k, x.stride(0), weight.stride(0), out.stride(0),
        delta, ln_weight, ln_bias, s, eps, xi if gather else x, di if gather else x,
        d_stride if gather else 0, x, 0, *((wait.rank, wait.timeout_ns) if wait is not None else (0, 0)),
        *((stamps, stamps.stride(0)) if stamps is not None else (x, 0)),
        *((words, n_valid) if argmax is not None else (x, 0)),
        HAS_BIAS=bias is not None, GELU=gelu, BLOCK_M=1, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k,
        STAGES=cfg.num_stages, ONE_SHOT=True, PDL=pdl, NORM=True, EARLY=pdl and pdl_early_release(),
        GATHER=gather, DELTA_ROWS=rows, PUSH=0, WAIT=rows if wait is not None else 0, STAMPS=stamps is not None,
        ARGMAX=words.numel() if argmax is not None else 0, num_warps=cfg.num_warps, launch_pdl=pdl,
    )  # fmt: skip
    return s, out
