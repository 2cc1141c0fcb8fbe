"""Paged-attention decode on CUDA: Triton programs read the past K/V through the block table, block by block, with
an online softmax, and fold in the new token. Same contract and result as `roseinfer.attention.paged_decode_attention`
(the torch reference it is tested against).

Two ways to lay the work out:
- one program per (sequence, head) walks all of that sequence's blocks (`paged_decode_kernel`);
- split (flash-decoding): one program per (sequence, head, split of `blocks_per_split` blocks) writes a partial
  softmax state (max, normaliser, weighted sum), and a second kernel per (sequence, head) merges the splits and the
  new token. More programs keep more bytes in flight: at workload (a)'s shapes the single kernel reached 62-69% of
  the copy bandwidth (docs/BENCHMARKS.md). The grid depends only on the table's width, so it fits a CUDA graph.
"""

from __future__ import annotations

_kernel = None


def _get_kernel():
    global _kernel
    if _kernel is not None:
        return _kernel
    import triton
    import triton.language as tl

    @triton.jit
    def paged_decode_kernel(
        q_ptr, kn_ptr, vn_ptr, kc_ptr, vc_ptr, table_ptr, lens_ptr, out_ptr,
        stride_qb, stride_qh, stride_nb, stride_nh, stride_cn, stride_ch, stride_cp, stride_tb, stride_ob, stride_oh,
        scale, D, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0)
        h = tl.program_id(1)
        d = tl.arange(0, BLOCK_D)
        dmask = d < D
        q = tl.load(q_ptr + b * stride_qb + h * stride_qh + d, mask=dmask, other=0.0).to(tl.float32)
        kn = tl.load(kn_ptr + b * stride_nb + h * stride_nh + d, mask=dmask, other=0.0).to(tl.float32)
        vn = tl.load(vn_ptr + b * stride_nb + h * stride_nh + d, mask=dmask, other=0.0).to(tl.float32)
        # The new token starts the running softmax: max m, normaliser l, weighted sum acc [D].
        m = tl.sum(q * kn, 0) * scale
        l = m * 0.0 + 1.0  # noqa: E741
        acc = vn
        past = tl.load(lens_ptr + b)
        offs = tl.arange(0, BLOCK)
        for i in range(0, tl.cdiv(past, BLOCK)):
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

    _kernel = paged_decode_kernel
    return _kernel


_split_kernels = None


def _get_split_kernels():
    global _split_kernels
    if _split_kernels is not None:
        return _split_kernels
    import triton
    import triton.language as tl

    @triton.jit
    def paged_decode_partial_kernel(
        q_ptr, kc_ptr, vc_ptr, table_ptr, lens_ptr, acc_ptr, ml_ptr,
        stride_qb, stride_qh, stride_cn, stride_ch, stride_cp, stride_tb,
        scale, D, S, BLOCKS_PER_SPLIT, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0)
        h = tl.program_id(1)
        s = tl.program_id(2)
        nh = tl.num_programs(1)
        d = tl.arange(0, BLOCK_D)
        dmask = d < D
        past = tl.load(lens_ptr + b)
        first = s * BLOCKS_PER_SPLIT
        last = tl.minimum(first + BLOCKS_PER_SPLIT, tl.cdiv(past, BLOCK))
        q = tl.load(q_ptr + b * stride_qb + h * stride_qh + d, mask=dmask, other=0.0).to(tl.float32)
        m = tl.max(tl.full([BLOCK], float("-inf"), tl.float32), 0)  # running max (-inf: an empty split)
        l = tl.sum(tl.zeros([BLOCK], tl.float32), 0)  # noqa: E741
        acc = tl.zeros([BLOCK_D], tl.float32)
        offs = tl.arange(0, BLOCK)
        for i in range(first, last):
            blk = tl.load(table_ptr + b * stride_tb + i).to(tl.int64)
            pmask = (i * BLOCK + offs) < past
            base = blk * stride_cn + h * stride_ch + offs[:, None] * stride_cp + d[None, :]
            tile_mask = pmask[:, None] & dmask[None, :]
            k = tl.load(kc_ptr + base, mask=tile_mask, other=0.0).to(tl.float32)  # [BLOCK, D]
            v = tl.load(vc_ptr + base, mask=tile_mask, other=0.0).to(tl.float32)
            sc = tl.where(pmask, tl.sum(k * q[None, :], 1) * scale, float("-inf"))  # [BLOCK]
            m_new = tl.maximum(m, tl.max(sc, 0))
            alpha = tl.exp(m - m_new)
            p = tl.exp(sc - m_new)
            acc = acc * alpha + tl.sum(p[:, None] * v, 0)
            l = l * alpha + tl.sum(p, 0)  # noqa: E741
            m = m_new
        row = (b * nh + h) * S + s  # workspace row of this (sequence, head, split)
        tl.store(acc_ptr + row * BLOCK_D + d, acc)
        tl.store(ml_ptr + row * 2, m)
        tl.store(ml_ptr + row * 2 + 1, l)

    @triton.jit
    def paged_decode_combine_kernel(
        q_ptr, kn_ptr, vn_ptr, acc_ptr, ml_ptr, out_ptr,
        stride_qb, stride_qh, stride_nb, stride_nh, stride_ob, stride_oh,
        scale, D, S, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0)
        h = tl.program_id(1)
        nh = tl.num_programs(1)
        d = tl.arange(0, BLOCK_D)
        dmask = d < D
        q = tl.load(q_ptr + b * stride_qb + h * stride_qh + d, mask=dmask, other=0.0).to(tl.float32)
        kn = tl.load(kn_ptr + b * stride_nb + h * stride_nh + d, mask=dmask, other=0.0).to(tl.float32)
        vn = tl.load(vn_ptr + b * stride_nb + h * stride_nh + d, mask=dmask, other=0.0).to(tl.float32)
        m_self = tl.sum(q * kn, 0) * scale  # the new token's score
        splits = tl.arange(0, BLOCK_S)
        smask = splits < S
        rows = (b * nh + h) * S + splits
        ms = tl.load(ml_ptr + rows * 2, mask=smask, other=float("-inf"))  # [S]
        ls = tl.load(ml_ptr + rows * 2 + 1, mask=smask, other=0.0)
        accs = tl.load(
            acc_ptr + rows[:, None] * BLOCK_D + d[None, :], mask=smask[:, None], other=0.0
        )  # [S, D]
        m = tl.maximum(tl.max(ms, 0), m_self)  # finite: the new token always counts
        w = tl.exp(ms - m)  # 0 for empty splits
        w_self = tl.exp(m_self - m)
        l = tl.sum(ls * w, 0) + w_self  # noqa: E741
        acc = tl.sum(accs * w[:, None], 0) + vn * w_self
        out = acc / l
        tl.store(out_ptr + b * stride_ob + h * stride_oh + d, out.to(out_ptr.dtype.element_ty), mask=dmask)

    _split_kernels = (paged_decode_partial_kernel, paged_decode_combine_kernel)
    return _split_kernels


def paged_decode_attention_triton(
    q, k_new, v_new, k_cache, v_cache, block_table, past_lens, scale: float, num_warps: int = 4,
    blocks_per_split: int | None = 2,
):  # fmt: skip
    """q, k_new, v_new [B, H, D]; caches [N, H, BLOCK, D]; block_table [B, M] (any row stride); past_lens [B].

    Splits the blocks into groups of `blocks_per_split` when the table is wider than that (None: never split).
    """
    import torch
    import triton

    b, h, d = q.shape
    assert k_cache.is_contiguous() and v_cache.is_contiguous() and block_table.stride(1) == 1
    out = torch.empty_like(q)
    width = block_table.shape[1]
    block_d = triton.next_power_of_2(d)
    if blocks_per_split is None or width <= blocks_per_split:
        _get_kernel()[(b, h)](
            q, k_new, v_new, k_cache, v_cache, block_table, past_lens, out,
            q.stride(0), q.stride(1), k_new.stride(0), k_new.stride(1),
            k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_table.stride(0), out.stride(0),
            out.stride(1), scale, d, BLOCK=k_cache.shape[2], BLOCK_D=block_d, num_warps=num_warps,
        )  # fmt: skip
        return out
    partial, combine = _get_split_kernels()
    splits = triton.cdiv(width, blocks_per_split)
    acc = torch.empty(
        b * h * splits, block_d, dtype=torch.float32, device=q.device
    )  # per-split weighted sums
    ml = torch.empty(b * h * splits, 2, dtype=torch.float32, device=q.device)  # per-split max and normaliser
    partial[(b, h, splits)](
        q, k_cache, v_cache, block_table, past_lens, acc, ml,
        q.stride(0), q.stride(1), k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_table.stride(0),
        scale, d, splits, blocks_per_split, BLOCK=k_cache.shape[2], BLOCK_D=block_d, num_warps=num_warps,
    )  # fmt: skip
    combine[(b, h)](
        q, k_new, v_new, acc, ml, out,
        q.stride(0), q.stride(1), k_new.stride(0), k_new.stride(1), out.stride(0), out.stride(1),
        scale, d, splits, BLOCK_S=triton.next_power_of_2(splits), BLOCK_D=block_d,
    )  # fmt: skip
    return out
