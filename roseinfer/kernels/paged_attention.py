"""Paged-attention decode on CUDA: one Triton program per (sequence, head) reads the past K/V through the block
table, block by block, with an online softmax, and folds in the new token (optionally writing it to its slot:
the step's KV append). Same contract and result as `roseinfer.attention.paged_decode_attention` (the torch
reference it is tested against).
"""

from __future__ import annotations

import functools


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
        scale, D, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, STAGES: tl.constexpr, APPEND: tl.constexpr,
        PDL: tl.constexpr,
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
        offs = tl.arange(0, BLOCK)
        for i in tl.range(
            0, tl.cdiv(past, BLOCK), num_stages=STAGES
        ):  # STAGES > 1: next blocks' loads in flight
            blk = tl.load(table_ptr + b * stride_tb + i).to(tl.int64)
            pmask = (i * BLOCK + offs) < past
            base = blk * stride_cn + h * stride_ch + offs[:, None] * stride_cp + d[None, :]
            tile_mask = pmask[:, None] & dmask[None, :]
            k = tl.load(kc_ptr + base, mask=tile_mask, other=0.0).to(tl.float32)  # [BLOCK, D]
            s = tl.where(pmask, tl.sum(k * q[None, :], 1) * scale, float("-inf"))  # [BLOCK]
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
    num_warps: int = 4,
    num_stages: int = 2,
    append: bool = False,
):
    """q, k_new, v_new [B, H, D]; caches [N, H, BLOCK, D]; block_table [B, M] (any row stride); past_lens [B].

    append=True also writes k_new/v_new into the caches at each sequence's next slot (token `past`, which the
    table must already cover): the KV append of a decode step done by the program that reads them anyway, one
    launch per layer fewer (in a CUDA graph every kernel costs its run time plus a gap).

    num_stages=2 pipelines the block loop (the next block's K/V loads are issued before this block's math): on
    the H100 at batch 64 it took 256 past tokens from 27.1 to 22.4 us (63% -> 76% of copy bandwidth) and 512 from
    49.3 to 39.5 us (69% -> 86%); deeper pipelines were slower (scripts/bench_paged_attention.py).
    """
    import torch
    import triton

    from roseinfer.kernels.pdl import pdl_attention_release, pdl_enabled

    b, h, d = q.shape
    assert k_cache.is_contiguous() and v_cache.is_contiguous() and block_table.stride(1) == 1
    out = torch.empty_like(q)
    _get_kernel()[(b, h)](
        q, k_new, v_new, k_cache, v_cache, block_table, past_lens, out,
        q.stride(0), q.stride(1), k_new.stride(0), k_new.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_table.stride(0), out.stride(0), out.stride(1),
        scale, d, BLOCK=k_cache.shape[2], BLOCK_D=triton.next_power_of_2(d), STAGES=num_stages, APPEND=append,
        PDL=pdl_enabled(attention=True) or pdl_attention_release(), num_warps=num_warps,
        launch_pdl=pdl_enabled(attention=True),
    )  # fmt: skip
    return out
