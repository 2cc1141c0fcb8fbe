"""The prefill's GEMM shapes: a prefill's packed token rows padded up to a few sizes, each met once at start-up.

cuBLAS picks an algorithm for every (rows, N, K) it has not met, on the host: in a server each prefill brings a new
row count (the sum of its prompts' lengths), and GPT-2 small's four linears of one layer then cost 1.1 ms of host
CPU time at p50 and 9.2 ms at p90, against 0.18 ms for a row count met before (`scripts/probe_gemm_shapes.py` on an
H200: a 90-token prefill took 21.8 ms, a 1,675-token one 7.6 ms; docs/BENCHMARKS.md, session 23). Padded to
`padded_rows`, the rows take at most 48 sizes up to 16,384, and `warm_gemms` meets each at start-up. The padding
rows' outputs are never read: every op is per row except attention, which reads only the real rows
(`kv_context.PrefillKV`), and the sampled rows are the real ones.

On the CPU there is no such cost and padding would be compute: CUDA only (`ModelRunner.prefill_rows`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from roseinfer.linears import linear

ROW_STEP = 64  # rows up to 1,024 round up to a multiple of this


def padded_rows(tokens: int) -> int:
    """`tokens` rounded up: to a multiple of 64 up to 1,024, beyond to a multiple of 1/16 of the next power of two
    (at most 12.5% padding there; 8 sizes per doubling)."""
    step = max(ROW_STEP, (1 << (tokens - 1).bit_length()) // 16)
    return -(-tokens // step) * step


def row_sizes(max_tokens: int) -> list[int]:
    """Every size `padded_rows` gives for 1..max_tokens, ascending."""
    sizes, t = [], 1
    while t <= max_tokens:
        sizes.append(padded_rows(t))
        t = sizes[-1] + 1
    return sizes


@torch.inference_mode()
def warm_gemms(model, max_tokens: int, max_seqs: int) -> int:
    """Call each of the first block's linears (every block has the same shapes) at every padded row count up to
    `max_tokens`, and the lm_head at 1..max_seqs rows (the sampled rows of a prefill), as the prefill calls them;
    returns the GEMM calls made."""
    block = model.h[0]
    weight = block.c_attn.weight  # [3C_r, C]
    head = model.wte.weight if model.lm_head_weight is None else model.lm_head_weight  # [V(_PAD), C]
    calls = 0
    for rows in row_sizes(max_tokens):
        h = torch.zeros(rows, weight.shape[1], dtype=weight.dtype, device=weight.device)  # [T, C]
        qkv = linear(h, block.c_attn)  # [T, 3C_r]
        o = torch.zeros(rows, block.attn_proj.weight.shape[1], dtype=h.dtype, device=h.device)  # [T, C_r]
        linear(o, block.attn_proj)
        g = linear(h, block.c_fc, gelu=True)  # [T, 4C_r]: cuBLASLt's GELU epilogue, as in the prefill
        linear(g, block.mlp_proj)
        calls += 4
        del qkv, o, g
    for seqs in range(1, max_seqs + 1):
        F.linear(torch.zeros(seqs, head.shape[1], dtype=head.dtype, device=head.device), head)
        calls += 1
    return calls
