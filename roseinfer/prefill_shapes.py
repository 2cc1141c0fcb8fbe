"""The prefill's GEMM shapes: a prefill's packed token rows padded up to a few sizes, each met once at start-up.

cuBLAS picks an algorithm for every (rows, N, K) it has not met, on the host: in a server each prefill brings a new
row count (the sum of its prompts' lengths), and GPT-2 small's four linears of one layer then cost 1.1 ms of host
CPU time at p50 and 9.2 ms at p90, against 0.18 ms for a row count met before (`scripts/probe_gemm_shapes.py` on an
H200: a 90-token prefill took 21.8 ms, a 1,675-token one 7.6 ms; docs/BENCHMARKS.md, session 23). Padded to
`padded_rows`, the rows take at most 48 sizes up to 16,384, and `warm_gemms` meets each at start-up. The padding
rows' outputs are never read: every op is per row except attention, which reads only the real rows
(`kv_context.PrefillKV`), and the sampled rows are the real ones.

CUDA also loads a kernel's module at its first launch (lazy loading): the first prefill's LayerNorm, key/value
write and attention each stalled 23-32 ms on the H200, and the first prefix-cache hit's masked attention 32 ms, well
after start-up (scripts/probe_api_loop.py; docs/BENCHMARKS.md, session 23). `warm_prefill` runs one prefill through
every path (fresh prompts padded into one attention call, a prompt after a cached prefix) into the pad block.

On the CPU there is no such cost and padding would be compute: CUDA only (`ModelRunner.prefill_rows`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from roseinfer.linears import linear
from roseinfer.sequence import SamplingParams, Sequence

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
        linear(h, block.c_attn)  # [T, 3C_r]
        o = torch.zeros(rows, block.attn_proj.weight.shape[1], dtype=h.dtype, device=h.device)  # [T, C_r]
        linear(o, block.attn_proj)
        g = linear(h, block.c_fc, gelu=True)  # [T, 4C_r]: cuBLASLt's GELU epilogue, as in the prefill
        linear(g, block.mlp_proj)
        calls += 4
    for seqs in range(1, max_seqs + 1):
        F.linear(torch.zeros(seqs, head.shape[1], dtype=head.dtype, device=head.device), head)
        calls += 1
    return calls


def warm_seqs(pad_block: int, block_size: int, max_len: int) -> tuple[list[Sequence], list[int]]:
    """Dummy sequences whose blocks are all the pad block (its keys and values are never read), and their starts:
    two fresh prompts of different lengths (one padded attention call, with padding rows to drop) and one after a
    cached first block (the prefix path: its past keys gathered, a masked attention call); none longer than the
    model's positions (`max_len`), and the prefix one only where it fits."""
    wanted = [(block_size + 6, 0), (5, 0), (2 * block_size + 1, block_size)]  # (length, start)
    kept = [(min(n, max_len), start) for n, start in wanted if min(n, max_len) > start]
    seqs = [
        Sequence(id=-1 - i, prompt_ids=[0] * n, params=SamplingParams(max_new_tokens=1), arrival_ns=0,
                 block_ids=[pad_block] * -(-n // block_size))
        for i, (n, _) in enumerate(kept)
    ]  # fmt: skip
    return seqs, [start for _, start in kept]
