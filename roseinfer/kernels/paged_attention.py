"""Paged-attention decode on CUDA: one Triton program per (sequence, head) reads the past K/V through the block
table, a chunk of tokens at a time, with an online softmax, and folds in the new token (optionally writing it to
its slot: the step's KV append). Same contract and result as `roseinfer.attention.paged_decode_attention` (the
torch reference it is tested against).

How much a program takes per loop iteration (`AttentionTile`) follows how many programs there are
(`pick_attention_tile`). Up to a few hundred (sequence, head) pairs a program is a chain of DRAM round trips, and
whole blocks (64 tokens) on 4 warps with the loop pipelined are the shortest chain. With many more
pairs than the SMs hold, a program of 4 warps and 64-token stages holds so many registers and so much shared
memory that 7 fit on an SM (6.7 waves at batch 512): every program then costs a whole block's round trips however
few of its tokens are live, so a past of 65 tokens took as long as one of 128. One warp and 16 tokens an
iteration fit 24 (three stages) to 32 (two) programs on an SM, and the cost follows the live tokens (H100,
docs/BENCHMARKS.md, issue 27 round 7).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

# (sequence, head) pairs from which a program takes 16 tokens an iteration on one warp. In a decode step on the
# H100: GPT-2 small at 768 pairs (batch 64) 44 us faster at a past of 65 and within 3 us at 256 and 512;
# gpt2-medium at 512 (batch 32) 23 us faster at 65 but 64 slower at 256 and 116 at 1,000, where each program's
# chain is long; GPT-2 small at 384 (batch 32) likewise.
CHUNKED_FROM = 768
# pairs from which 16-token tiles take two pipeline stages rather than three (more programs an SM): at 1,536 and
# 6,144 pairs (GPT-2 small batch 128 and 512) two were 1 to 2% faster from a past of 64 (20% at a past of 1), at
# 768 (batch 64) three up to 10% faster; 1,024 (gpt2-medium batch 64) was not compared
TWO_STAGES_FROM = 1024
# Below this many pairs whole blocks take a third stage: at 96 and 192 pairs (GPT-2 small batch 8 and 16) decode
# ran 2% and 7% faster over 256 new tokens, 13% over 1,000; at 384 (batch 32) 1.4% slower over 256.
THREE_STAGES_BELOW = 256


@dataclass(frozen=True)
class AttentionTile:
    chunk: int  # past tokens an iteration (a power of two; at most the block size, which it divides)
    num_warps: int
    num_stages: int  # the loop's pipeline depth: the next chunks' K/V loads in flight during this one's math


def pick_attention_tile(
    pairs: int, block: int, chunks: bool = True, shares_sms: bool = False
) -> AttentionTile:
    """The tile for `pairs` (sequence, head) programs over blocks of `block` tokens (H100 sweep, issue 27 round 7,
    docs/BENCHMARKS.md). Below THREE_STAGES_BELOW pairs whole blocks take three stages (alone, at 12 to 192 pairs
    the kernel read 1,000 past tokens 19 to 26% faster than with two, 64 within 0.1 us). chunks=False: whole
    blocks on 4 warps, 2 stages, at every size (the design before).

    shares_sms: the kernel after it is released early and loads its weights beside it (`pdl_attention_release`,
    in the GEMV's and skinny GEMM's PDL buckets). 16-token tiles then stay off: their many one-warp programs need
    the SMs to themselves. gpt2-xl at batch 32 (800 pairs) replayed 5.9% slower with them beside an early
    attn_proj, and 0.6% faster than before without the early release (docs/BENCHMARKS.md, session 14)."""
    if chunks and pairs >= CHUNKED_FROM and not shares_sms:
        return AttentionTile(min(16, block), 1, 2 if pairs >= TWO_STAGES_FROM else 3)
    return AttentionTile(block, 4, 3 if chunks and pairs < THREE_STAGES_BELOW else 2)


@functools.cache
def _get_kernel():
    """The kernel, compiled on first use: importing this module needs no Triton (the CPU engine never calls it)."""
    import triton
    import triton.language as tl

    from roseinfer.kernels.pdl import gdc_functions

    gdc_wait, gdc_launch_dependents = gdc_functions()

    @triton.jit
    def paged_decode_kernel(
        q_ptr, kn_ptr, vn_ptr, kc_ptr, vc_ptr, table_ptr, lens_ptr, out_ptr,
        stride_qb, stride_qh, stride_nb, stride_nh, stride_cn, stride_ch, stride_cp, stride_tb, stride_ob, stride_oh,
        scale, D, BLOCK: tl.constexpr, CHUNK: tl.constexpr, BLOCK_D: tl.constexpr, STAGES: tl.constexpr,
        APPEND: tl.constexpr, PDL: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0)
        h = tl.program_id(1)
        d = tl.arange(0, BLOCK_D)
        dmask = d < D
        if PDL:  # roseinfer.kernels.pdl: q, k, v are the previous kernel's output (launched plainly, with
            # `pdl_attention_release`: the wait returns at once, and the release lets attn_proj load its weights)
            gdc_wait()
            gdc_launch_dependents()
        q = tl.load(q_ptr + b * stride_qb + h * stride_qh + d, mask=dmask, other=0.0).to(tl.float32)
        kn_raw = tl.load(kn_ptr + b * stride_nb + h * stride_nh + d, mask=dmask, other=0.0)
        vn_raw = tl.load(vn_ptr + b * stride_nb + h * stride_nh + d, mask=dmask, other=0.0)
        past = tl.load(lens_ptr + b)
        if APPEND:  # the new token's K/V into its slot: position `past`; the loop below never reads that slot
            slot_blk = tl.load(table_ptr + b * stride_tb + past // BLOCK).to(tl.int64)
            slot = slot_blk * stride_cn + h * stride_ch + (past % BLOCK) * stride_cp + d
            tl.store(kc_ptr + slot, kn_raw.to(kc_ptr.dtype.element_ty), mask=dmask)
            tl.store(vc_ptr + slot, vn_raw.to(vc_ptr.dtype.element_ty), mask=dmask)
        kn = kn_raw.to(tl.float32)
        vn = vn_raw.to(tl.float32)
        # The new token starts the running softmax: max m, normaliser l, weighted sum acc [D].
        m = tl.sum(q * kn, 0) * scale
        l = m * 0.0 + 1.0  # noqa: E741
        acc = vn
        offs = tl.arange(0, CHUNK)
        for i in tl.range(
            0, tl.cdiv(past, CHUNK), num_stages=STAGES
        ):  # STAGES > 1: next chunks' loads in flight
            tok = i * CHUNK + offs  # [CHUNK] past positions; CHUNK divides BLOCK: one block holds them all
            blk = tl.load(table_ptr + b * stride_tb + (i * CHUNK) // BLOCK).to(tl.int64)
            pmask = tok < past
            base = blk * stride_cn + h * stride_ch + (tok % BLOCK)[:, None] * stride_cp + d[None, :]
            tile_mask = pmask[:, None] & dmask[None, :]
            k = tl.load(kc_ptr + base, mask=tile_mask, other=0.0).to(tl.float32)  # [CHUNK, D]
            s = tl.where(pmask, tl.sum(k * q[None, :], 1) * scale, float("-inf"))  # [CHUNK]
            m_new = tl.maximum(m, tl.max(s, 0))
            alpha = tl.exp(m - m_new)
            p = tl.exp(s - m_new)
            v = tl.load(vc_ptr + base, mask=tile_mask, other=0.0).to(tl.float32)
            acc = acc * alpha + tl.sum(p[:, None] * v, 0)
            l = l * alpha + tl.sum(p, 0)  # noqa: E741
            m = m_new
        out = acc / l
        tl.store(out_ptr + b * stride_ob + h * stride_oh + d, out.to(out_ptr.dtype.element_ty), mask=dmask)

    return paged_decode_kernel


def paged_decode_attention_triton(
    q,
    k_new,
    v_new,
    k_cache,
    v_cache,
    block_table,
    past_lens,
    scale: float,
    tile: AttentionTile,
    append: bool = False,
):
    """q, k_new, v_new [B, H, D]; caches [N, H, BLOCK, D]; block_table [B, M] (any row stride); past_lens [B].

    append=True also writes k_new/v_new into the caches at each sequence's next slot (token `past`, which the
    table must already cover): the KV append of a decode step done by the program that reads them anyway, one
    launch per layer fewer (in a CUDA graph every kernel costs its run time plus a gap).

    tile: tokens an iteration, warps and pipeline depth; the engine's choice is `pick_attention_tile`'s, made in
    one place (`roseinfer.kv_context`, which knows the switch and the step's PDL scope). The loop's pipeline issues
    the next chunks' K/V loads before this chunk's math (scripts/bench_paged_attention.py times each tile).
    """
    import torch
    import triton

    from roseinfer.kernels.pdl import pdl_attention_release, pdl_enabled

    b, h, d = q.shape
    block = k_cache.shape[2]
    assert k_cache.is_contiguous() and v_cache.is_contiguous() and block_table.stride(1) == 1
    assert block % tile.chunk == 0 and tile.chunk & (tile.chunk - 1) == 0
    out = torch.empty_like(q)
    _get_kernel()[(b, h)](
        q, k_new, v_new, k_cache, v_cache, block_table, past_lens, out,
        q.stride(0), q.stride(1), k_new.stride(0), k_new.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_table.stride(0), out.stride(0), out.stride(1),
        scale, d, BLOCK=block, CHUNK=tile.chunk, BLOCK_D=triton.next_power_of_2(d), STAGES=tile.num_stages,
        APPEND=append, PDL=pdl_enabled(attention=True) or pdl_attention_release(), num_warps=tile.num_warps,
        launch_pdl=pdl_enabled(attention=True),
    )  # fmt: skip
    return out
