"""A split sum: the one-row MLP kernel's output (`roseinfer.cuda_ext.fused_mlp`) as float32 [SPLIT_ROWS, C], rows
whose sum is the [1, C] it stands for.

The kernel's 128 blocks each add a share of every output column with atomics. Into one row, each address took 128
adds, and their drain at L2 held the next kernel ~0.6 us a layer; block b adds into row b % SPLIT_ROWS instead,
and the kernel after it sums the rows as it reads its delta (in a captured chain of 12 MLPs on an H200: 4.18 us an
MLP at 8 rows, 4.24 at 4, 4.78 at one; docs/BENCHMARKS.md, session 35). In the engine the reader is the next
layer's attention kernel, whose LayerNorm reads every row after its wait: batch 1 was 1.2% faster at 4 rows than at
8, and 2 rows no faster than 8 (session 38). The readers that take a split delta: the
CUDA kernels (`fused_mlp`, `fused_attn`, built for one row or SPLIT_ROWS) and the norm GEMV's prologue
(`roseinfer.kernels.norm_gemv`); anything else joins it first (`joined`).

A K-split linear's output (`SplitK`) is the other split sum: at 33 to 512 rows attn_proj and mlp_proj run as the
CUTLASS GEMM over S slices of K in one launch (`roseinfer.cuda_ext.cutlass_gemm.cutlass_gemm_parts`), which gives
them S times the blocks (12 for GPT-2 small's 768 columns otherwise, each down the whole K), and leave float32
parts [S, T, C] without the bias. Their only reader is the residual add + LayerNorm after them
(`roseinfer.kernels.add_layernorm`), which adds the parts and the bias as it reads its delta; anything else joins
them first (`joined`).
"""

from __future__ import annotations

from typing import NamedTuple

import torch

SPLIT_ROWS = 4  # the CUDA kernels' common.cuh SPLIT_ROWS


class SplitK(NamedTuple):
    """A linear's output [T, C] as parts over slices of its K: parts [S, T, C] float32, bias [C] (the linear's, in
    its dtype); the output is their sum."""

    parts: torch.Tensor
    bias: torch.Tensor

    def joined(self) -> torch.Tensor:
        """The output [T, C] in the bias's dtype, rounded once (as a GEMM with the bias in its epilogue rounds)."""
        return (self.parts.sum(0) + self.bias.float()).to(self.bias.dtype)

    def rows(self, index) -> SplitK:
        """The rows `index` of the output, still split."""
        return SplitK(self.parts[:, index], self.bias)


def delta_rows(x: torch.Tensor, delta: torch.Tensor) -> int:
    """The rows a one-row reader sums for `delta` beside x [1, C]: 1 for a delta of x's shape, SPLIT_ROWS for a
    float32 split sum [SPLIT_ROWS, C], 0 where delta is neither."""
    if isinstance(delta, SplitK):  # a K split's parts: no one-row reader takes them
        return 0
    if delta.shape == x.shape:
        return 1
    if x.dim() == 2 and x.shape[0] == 1 and delta.shape == (SPLIT_ROWS, x.shape[1]):
        return SPLIT_ROWS if delta.dtype == torch.float32 else 0
    return 0


def joined(x: torch.Tensor, delta) -> torch.Tensor:
    """delta as x's shape: a split sum [SPLIT_ROWS, C] beside x [1, C] summed into [1, C] (float32), a `SplitK`
    into its output [T, C]; any other delta as it is."""
    if isinstance(delta, SplitK):
        return delta.joined()
    return delta.sum(0, keepdim=True) if delta_rows(x, delta) > 1 else delta
