"""The one place the model's linear layers are dispatched: cuBLAS (torch), the small-batch GEMV, the skinny GEMM or
the CUTLASS GEMM.

Every linear of a block goes through `linear(x, lin)`: c_attn, attn_proj, c_fc (with GELU) and mlp_proj. `lin` is
anything with `.weight` [N, K] and `.bias` [N] or None (an nn.Linear, or a tensor-parallel shard of one: sharded
shapes are just other shapes, and a row-parallel shard without a bias passes None).

Which kernel runs:
- inside `small_batch_gemv(max_rows)` (the captured decode step opens it; `roseinfer.cuda_graphs`), on CUDA in
  half precision, for inputs of at most `max_rows` rows where it was measured faster (`gemv_wins`):
  `roseinfer.kernels.gemv` (bias and GELU in its epilogue, no split-K reduce);
- inside `small_batch_gemv(.., skinny_max_rows=R)`, the same inputs of at most R rows where the GEMV does not run
  and it was measured faster (`skinny_wins`): `roseinfer.kernels.skinny_gemm` (tensor cores, split-K reduced in the
  same kernel, bias and GELU in its epilogue);
- inside `small_batch_gemv(.., cutlass_rows=(lo, hi))`, inputs of more than lo and at most hi rows in float16 with
  a bias, where it is built (`roseinfer.cuda_ext.cutlass_gemm.fits`): the CUTLASS Hopper GEMM that loads its
  weights before its PDL wait (bias and GELU in its epilogue); attn_proj and mlp_proj there, whose reader is the
  residual add (`linear_to_residual`), split along K into float32 parts (`cutlass_split_k`);
- otherwise torch: `F.linear`, and for c_fc one GEMM with cuBLASLt's GELU epilogue (`torch._addmm_activation`,
  the tanh form GPT-2 uses) unless gelu_epilogue=False asks for the earlier GEMM + GELU kernel pair.

`norm_linear(x, delta, ln, lin)` is the same GEMV with the residual add and LayerNorm in its prologue, for one
row inside `small_batch_gemv(.., norm_prologue=True)` (`norm_gemv_applies` says where; the model falls back to
the add + LayerNorm kernel and `linear` elsewhere). In front of the first block it can also gather its two rows
from the embedding tables, inside `small_batch_gemv(.., embedding_gather=True)` (`embedding_gather_applies`), and
the tied lm_head at one row is the same kernel with ln_f in its prologue, inside `small_batch_gemv(..,
lm_head=True)` (`lm_head_gemv_applies`, `norm_lm_head`).

fp32 stays on cuBLAS: the fp32 tests compare greedy tokens with Hugging Face exactly, and the GEMV's other
summation order could flip a near-tie.
"""

from __future__ import annotations

import contextlib
import contextvars
from typing import NamedTuple

import torch
import torch.nn.functional as F

# Rows up to which the GEMV kernel runs (0: never). Set only inside `small_batch_gemv`.
_GEMV_MAX_ROWS: contextvars.ContextVar[int] = contextvars.ContextVar("roseinfer_gemv_max_rows", default=0)
# Whether `norm_linear` may fold the residual add + LayerNorm into the GEMV's prologue (one row only).
_NORM_PROLOGUE: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "roseinfer_norm_prologue", default=False
)
# Whether that prologue may also gather the first block's input rows from the embedding tables.
_EMBEDDING_GATHER: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "roseinfer_embedding_gather", default=False
)
# Whether the one-row lm_head may run as that GEMV with ln_f in its prologue (instead of ln_f's kernel and cuBLAS).
_LM_HEAD: contextvars.ContextVar[bool] = contextvars.ContextVar("roseinfer_lm_head_gemv", default=False)
# Rows up to which the skinny GEMM runs where the GEMV does not (0: never), and the split-K scratch it uses there.
_SKINNY_MAX_ROWS: contextvars.ContextVar[int] = contextvars.ContextVar("roseinfer_skinny_max_rows", default=0)
_SKINNY_SCRATCH: contextvars.ContextVar = contextvars.ContextVar("roseinfer_skinny_scratch", default=None)
# Rows (lo, hi]: inputs of more than lo and at most hi rows run as the CUTLASS GEMM where it fits ((0, 0): never).
_CUTLASS_ROWS: contextvars.ContextVar[tuple[int, int]] = contextvars.ContextVar(
    "roseinfer_cutlass_rows", default=(0, 0)
)
# There, the K per part of a linear whose reader is a residual add (`linear_to_residual`; 0: no split), and the
# fewest parts such a linear splits into
_CUTLASS_SPLIT_K: contextvars.ContextVar[int] = contextvars.ContextVar("roseinfer_cutlass_split_k", default=0)
_CUTLASS_MIN_SPLITS: contextvars.ContextVar[int] = contextvars.ContextVar(
    "roseinfer_cutlass_min_splits", default=1
)
# There, whether the GEMM runs on its shallow pipeline (`roseinfer.cuda_ext.cutlass_gemm.SHALLOW_STAGES`)
_CUTLASS_SHALLOW: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "roseinfer_cutlass_shallow", default=False
)
# Where a one-row MLP (with norm_prologue and lm_head) may run as the split-K CUDA kernel: its output buffers
# (`roseinfer.cuda_ext.fused_mlp.MlpScratch`), or None.
_CUDA_MLP: contextvars.ContextVar = contextvars.ContextVar("roseinfer_cuda_mlp", default=None)
# Likewise for a one-row attention half as one CUDA kernel (`roseinfer.cuda_ext.fused_attn.AttnScratch`), or None.
_CUDA_ATTN: contextvars.ContextVar = contextvars.ContextVar("roseinfer_cuda_attn", default=None)
# Where the one-row lm_head runs as `norm_lm_head`, the words its GEMV folds the greedy token into
# (`roseinfer.kernels.argmax.LmHeadArgmax`), or None.
_LM_HEAD_ARGMAX: contextvars.ContextVar = contextvars.ContextVar("roseinfer_lm_head_argmax", default=None)


@contextlib.contextmanager
def small_batch_gemv(
    max_rows: int,
    norm_prologue: bool = False,
    embedding_gather: bool = False,
    lm_head: bool = False,
    skinny_max_rows: int = 0,
    scratch=None,
    mlp_scratch=None,
    attn_scratch=None,
    cutlass_rows: tuple[int, int] = (0, 0),
    cutlass_split_k: int = 0,
    cutlass_min_splits: int = 1,
    cutlass_shallow: bool = False,
    lm_head_argmax=None,
):
    """Linears of at most `max_rows` input rows run as the GEMV kernel inside this block (0: never);
    norm_prologue: one-row `norm_linear` calls fold the add + LayerNorm into it too; embedding_gather and lm_head
    (each with norm_prologue): the first block's call gathers its rows from the embedding tables as well, and the
    one-row lm_head runs as `norm_lm_head`. skinny_max_rows: linears of at most this many rows that the GEMV does
    not take run as the skinny GEMM, with `scratch` (a `roseinfer.kernels.skinny_gemm.SkinnyScratch`; None: the
    process's). mlp_scratch (with norm_prologue and lm_head): a one-row MLP runs as one CUDA kernel into these
    buffers where `cuda_mlp_applies`; attn_scratch likewise, its attention half where `cuda_attn_applies`.
    cutlass_rows (lo, hi): linears of more than lo and at most hi rows run as the CUTLASS GEMM where it fits;
    there `linear_to_residual` splits K into parts of about cutlass_split_k (0: no split), at least
    cutlass_min_splits of them, and cutlass_shallow runs it on its shallow pipeline. lm_head_argmax (with lm_head):
    the one-row lm_head's GEMV also folds the greedy token into it (a `roseinfer.kernels.argmax.LmHeadArgmax`)."""
    tokens = (
        _GEMV_MAX_ROWS.set(max_rows),
        _NORM_PROLOGUE.set(norm_prologue),
        _EMBEDDING_GATHER.set(norm_prologue and embedding_gather),
        _LM_HEAD.set(norm_prologue and lm_head),
        _SKINNY_MAX_ROWS.set(skinny_max_rows),
        _SKINNY_SCRATCH.set(scratch),
        _CUDA_MLP.set(mlp_scratch if norm_prologue and lm_head else None),
        _CUDA_ATTN.set(attn_scratch if norm_prologue and lm_head else None),
        _CUTLASS_ROWS.set(cutlass_rows),
        _CUTLASS_SPLIT_K.set(cutlass_split_k),
        _CUTLASS_MIN_SPLITS.set(cutlass_min_splits),
        _CUTLASS_SHALLOW.set(cutlass_shallow),
        _LM_HEAD_ARGMAX.set(lm_head_argmax if norm_prologue and lm_head else None),
    )
    try:
        yield
    finally:
        _LM_HEAD_ARGMAX.reset(tokens[12])
        _CUTLASS_SHALLOW.reset(tokens[11])
        _CUTLASS_MIN_SPLITS.reset(tokens[10])
        _CUTLASS_SPLIT_K.reset(tokens[9])
        _CUTLASS_ROWS.reset(tokens[8])
        _CUDA_ATTN.reset(tokens[7])
        _CUDA_MLP.reset(tokens[6])
        _SKINNY_SCRATCH.reset(tokens[5])
        _SKINNY_MAX_ROWS.reset(tokens[4])
        _LM_HEAD.reset(tokens[3])
        _EMBEDDING_GATHER.reset(tokens[2])
        _NORM_PROLOGUE.reset(tokens[1])
        _GEMV_MAX_ROWS.reset(tokens[0])


def uses_gemv(x: torch.Tensor) -> bool:
    return 0 < x.shape[0] <= _GEMV_MAX_ROWS.get() and _triton_input(x)


def uses_skinny_gemm(x: torch.Tensor) -> bool:
    return 0 < x.shape[0] <= _SKINNY_MAX_ROWS.get() and _triton_input(x)


def uses_cutlass_gemm(x: torch.Tensor) -> bool:
    lo, hi = _CUTLASS_ROWS.get()
    return lo < x.shape[0] <= hi


def _triton_input(x: torch.Tensor) -> bool:
    return x.is_cuda and x.dtype in (torch.float16, torch.bfloat16) and x.stride(-1) == 1


def gemv_wins(rows: int, n: int, k: int) -> bool:
    """Where the GEMV beat cuBLAS on the H100 (scripts/bench_gemv.py, docs/BENCHMARKS.md): at 1 and 2 rows every
    linear; up to 8 rows the ones with N <= K (attn_proj, mlp_proj: cuBLAS splits K there and adds a reduce
    kernel), not c_attn and c_fc (at 8 rows 2 to 3 us slower than cuBLAS)."""
    return rows <= 2 or n <= k


def skinny_wins(rows: int, n: int, k: int) -> bool:
    """Where the skinny GEMM under PDL made the captured step faster on the H100 (scripts/bench_graph_step.py,
    scripts/bench_gemv.py --skinny; docs/BENCHMARKS.md, issue 27 round 6): from 9 to 32 rows every linear; up to 64
    only the ones with N <= K (attn_proj, mlp_proj: cuBLAS splits K there and adds a reduce kernel). Not at 8 rows
    and below: c_attn and c_fc alone were faster in a chain of their own, but the batch-8 step beside the GEMV
    was 35 us slower."""
    return 8 < rows and (rows <= 32 or n <= k)


def _gemv_takes(x: torch.Tensor, weight: torch.Tensor) -> bool:
    return uses_gemv(x) and weight.is_contiguous() and gemv_wins(x.shape[0], *weight.shape)


def _skinny_takes(x: torch.Tensor, weight: torch.Tensor) -> bool:
    if not (uses_skinny_gemm(x) and weight.is_contiguous() and skinny_wins(x.shape[0], *weight.shape)):
        return False
    from roseinfer.kernels.skinny_gemm import skinny_gemm_fits

    return skinny_gemm_fits(x, weight)


def _cutlass_takes(x: torch.Tensor, weight: torch.Tensor, bias) -> bool:
    """Whether `linear` runs the CUTLASS GEMM here: inside its rows, where neither Triton kernel comes first."""
    if not uses_cutlass_gemm(x) or _gemv_takes(x, weight) or _skinny_takes(x, weight):
        return False
    from roseinfer.cuda_ext import cutlass_gemm

    return cutlass_gemm.fits(x, weight, bias)


def linear(x: torch.Tensor, lin, gelu: bool = False, gelu_epilogue: bool = True) -> torch.Tensor:
    """act(x @ lin.weight^T + lin.bias): x [T, K] -> [T, N]; act is GPT-2's tanh GELU when `gelu`, else none."""
    weight, bias = lin.weight, lin.bias
    if _gemv_takes(x, weight):
        from roseinfer.kernels.gemv import gemv_triton

        return gemv_triton(x, weight, bias, gelu=gelu)
    if _skinny_takes(x, weight):
        from roseinfer.kernels.skinny_gemm import skinny_gemm_triton

        return skinny_gemm_triton(x, weight, bias, gelu=gelu, scratch=_SKINNY_SCRATCH.get())
    if _cutlass_takes(x, weight, bias):
        from roseinfer.cuda_ext import cutlass_gemm

        return cutlass_gemm.cutlass_gemm(x, weight, bias, gelu=gelu, shallow=_CUTLASS_SHALLOW.get())
    if not gelu:
        return F.linear(x, weight, bias)
    if gelu_epilogue and bias is not None and x.is_cuda and x.dtype in (torch.float16, torch.bfloat16):
        return torch._addmm_activation(bias, x, weight.t(), use_gelu=True)
    return F.gelu(F.linear(x, weight, bias), approximate="tanh")


def linear_to_residual(x: torch.Tensor, lin):
    """`linear(x, lin)` for a linear whose only reader is the residual add + LayerNorm after it (attn_proj and
    mlp_proj on one device): where `linear` would run the CUTLASS GEMM and `small_batch_gemv(cutlass_split_k=)`
    asks, its output as parts over slices of K (`roseinfer.kernels.split_sum.SplitK`), which that reader adds.
    Elsewhere a tensor [T, N], as `linear` returns."""
    k_per_split = _CUTLASS_SPLIT_K.get()
    if k_per_split:  # (inside a captured step only: the eager path asks nothing more)
        from roseinfer.cuda_ext import cutlass_gemm

        # the count first: where it is 1 (attn_proj at 768 above 64 rows) `linear` alone decides, once
        splits = cutlass_gemm.split_count(lin.weight.shape[1], k_per_split, _CUTLASS_MIN_SPLITS.get())
        if splits > 1 and _cutlass_takes(x, lin.weight, lin.bias):
            from roseinfer.kernels.split_sum import SplitK

            parts = cutlass_gemm.cutlass_gemm_parts(x, lin.weight, splits, shallow=_CUTLASS_SHALLOW.get())
            return SplitK(parts, lin.bias)  # [S, T, N], [N]
    return linear(x, lin)


def norm_gemv_applies(x: torch.Tensor, delta: torch.Tensor, lin) -> bool:
    """Whether `norm_linear` runs as one kernel here: inside `small_batch_gemv(.., norm_prologue=True)`, where the
    GEMV itself would run, at one row (`roseinfer.kernels.norm_gemv.norm_gemv_fits`)."""
    if not (_NORM_PROLOGUE.get() and uses_gemv(x) and isinstance(delta, torch.Tensor)):
        return False  # (a K split's parts, `linear_to_residual`, only where the GEMV does not run)
    if not (delta.stride(-1) == 1 and lin.weight.is_contiguous()):
        return False
    from roseinfer.kernels.norm_gemv import norm_gemv_fits

    return norm_gemv_fits(x, lin.weight) and gemv_wins(1, *lin.weight.shape)


def fused_allreduce_applies(x: torch.Tensor, lin) -> bool:
    """Whether a row-parallel projection's all-reduce may be fused into the GEMVs (`roseinfer.fused_allreduce`):
    one row, where the GEMV runs the projection and where every reader of its output is a norm GEMV that waits
    for it (inside `small_batch_gemv(.., norm_prologue=True, lm_head=True)`: the next block's c_attn or this
    block's c_fc, or the lm_head with ln_f, each `norm_gemv_fits` at the output's width). At one row the GEMV wins
    at every shape (`gemv_wins`)."""
    from roseinfer.kernels.gemv import ONE_SHOT_MAX_K

    weight = lin.weight
    return (
        _LM_HEAD.get()
        and x.shape[0] == 1
        and uses_gemv(x)
        and weight.is_contiguous()
        and weight.shape[0] <= ONE_SHOT_MAX_K
    )


def embedding_gather_applies(ids: torch.Tensor, wte: torch.Tensor, wpe: torch.Tensor, lin) -> bool:
    """Whether the first block's `norm_linear` may gather its input rows itself (`index=`): inside
    `small_batch_gemv(.., embedding_gather=True)`, one token, and where its norm GEMV would run on one row of the
    tables."""
    if not (_EMBEDDING_GATHER.get() and ids.numel() == 1 and wte.is_contiguous() and wpe.is_contiguous()):
        return False
    return norm_gemv_applies(wte[:1], wpe[:1], lin)


def norm_linear(x: torch.Tensor, delta: torch.Tensor, ln, lin, gelu: bool = False, index=None, wait=None):
    """(s, act(LayerNorm(s) @ lin.weight^T + lin.bias)) with s = x + delta, as one GEMV kernel whose prologue adds
    and normalises (x, delta [1, K]; callers check `norm_gemv_applies` first). Replaces the add + LayerNorm
    kernel in front of c_attn and c_fc at batch 1: in a captured step at batch 1 each kernel costs ~1.5 to 2 us
    however little it does (docs/BENCHMARKS.md, issue 27). index: (token ids, positions), [1] each, with x and
    delta the embedding tables (callers check `embedding_gather_applies`): the rows are gathered in the prologue,
    which replaces the two embedding kernels too. wait: delta is a fused all-reduce's rows
    (`roseinfer.fused_allreduce.PushedRows`), which the prologue waits for."""
    from roseinfer.kernels.norm_gemv import norm_gemv_triton

    return norm_gemv_triton(
        x, delta, ln.weight, ln.bias, ln.eps, lin.weight, lin.bias, gelu=gelu, index=index, wait=wait
    )


class Weight(NamedTuple):
    """A linear that is a weight alone ([N, K], no bias): the tied lm_head, for `norm_gemv_applies`."""

    weight: torch.Tensor
    bias: torch.Tensor | None = None


def lm_head_gemv_applies(x: torch.Tensor, delta: torch.Tensor, weight: torch.Tensor) -> bool:
    """Whether `norm_lm_head` runs here: inside `small_batch_gemv(.., lm_head=True)`, where the norm GEMV runs
    (one row)."""
    return _LM_HEAD.get() and norm_gemv_applies(x, delta, Weight(weight))


def norm_lm_head(
    x: torch.Tensor, delta: torch.Tensor, ln, weight: torch.Tensor, vocab: int, wait=None
) -> torch.Tensor:
    """LayerNorm(x + delta) @ weight^T (x, delta [1, C], weight [V_PAD, C]) -> logits [1, V_PAD] as one kernel:
    ln_f's add + LayerNorm in the prologue of the GEMV (callers check `lm_head_gemv_applies`). On the H100 the
    GEMV moved the 77 MB of GPT-2's lm_head at 90% of the copy bandwidth where cuBLAS took 13% longer
    (docs/BENCHMARKS.md, issue 27 round 5), and the LayerNorm's own kernel goes. Inside
    `small_batch_gemv(.., lm_head_argmax=)` it also folds the greedy token of the first `vocab` logits into
    those words and marks them `folded`."""
    from roseinfer.kernels.norm_gemv import norm_gemv_triton

    fold = _LM_HEAD_ARGMAX.get()
    argmax = None if fold is None else (fold.words, vocab)
    logits = norm_gemv_triton(x, delta, ln.weight, ln.bias, ln.eps, weight, wait=wait, argmax=argmax)[1]
    if fold is not None:
        fold.folded = True
    return logits


def cuda_mlp_applies(x: torch.Tensor, delta: torch.Tensor, ln, c_fc, mlp_proj) -> bool:
    """Whether `cuda_mlp` runs the MLP here: inside `small_batch_gemv(.., norm_prologue=True, lm_head=True,
    mlp_scratch=...)` (the norm GEMVs after it read its float32 output), where the norm GEMV would run c_fc (one
    row), and where the CUDA kernel is built for these shapes (`roseinfer.cuda_ext.fused_mlp.fused_mlp_applies`: on
    CPU machines never)."""
    if _CUDA_MLP.get() is None or not norm_gemv_applies(x, delta, c_fc):
        return False
    from roseinfer.cuda_ext.fused_mlp import fused_mlp_applies

    return fused_mlp_applies(x, delta, ln, c_fc, mlp_proj)


def cuda_mlp(x: torch.Tensor, delta: torch.Tensor, block, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, mlp(ln_2(s))) with s = x + delta: s [1, C] in x's dtype, the MLP's output in float32 as a split sum
    [R, C] (`roseinfer.kernels.split_sum`; the last layer's [1, C]), as one CUDA kernel (callers check
    `cuda_mlp_applies`) writing layer `layer`'s buffer of the scratch."""
    from roseinfer.cuda_ext.fused_mlp import block_mlp
    from roseinfer.kernels.pdl import pdl_enabled

    return block_mlp(x, delta, block, layer, _CUDA_MLP.get(), pdl=pdl_enabled())


def cuda_attn_applies(x: torch.Tensor, delta: torch.Tensor, block, kv, n_positions: int, index=None) -> bool:
    """Whether `cuda_attn` runs the attention half here: inside `small_batch_gemv(.., norm_prologue=True,
    lm_head=True, attn_scratch=...)`, where the norm GEMV would run c_attn (one row; `index`: the first block,
    gathering from the embedding tables), on a captured step's static KV context (`StaticDecodeKV`: the block
    table and past length on the device), and where the CUDA kernel is built for these shapes
    (`roseinfer.cuda_ext.fused_attn.fused_attn_applies`: on CPU machines never)."""
    from roseinfer.kv_context import StaticDecodeKV

    if _CUDA_ATTN.get() is None or not isinstance(kv, StaticDecodeKV) or block.tp is not None:
        return False
    rows = (x[:1], delta[:1]) if index is not None else (x, delta)
    if not norm_gemv_applies(*rows, block.c_attn):
        return False
    from roseinfer.cuda_ext.fused_attn import fused_attn_applies

    k_cache = kv.cache.k_caches[0]
    return fused_attn_applies(x, delta, block, k_cache, kv.past_lens, n_positions, index)


def cuda_attn(x: torch.Tensor, delta: torch.Tensor, block, layer: int, kv, index=None):
    """(s, attention half(ln_1(s))) with s = x + delta: s [1, C] float16, the attn_proj output [1, C] in float32,
    as one CUDA kernel (callers check `cuda_attn_applies`) writing layer `layer`'s buffer of the scratch and the
    new token's K/V into the cache."""
    from roseinfer.cuda_ext.fused_attn import block_attention
    from roseinfer.kernels.pdl import pdl_enabled

    return block_attention(x, delta, block, layer, kv, _CUDA_ATTN.get(), pdl=pdl_enabled(), index=index)
