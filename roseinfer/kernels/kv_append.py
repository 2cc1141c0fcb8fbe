"""KV append: write new keys/values [B, H, D] into paged caches [N_BLOCKS, H, BLOCK, D], K and V in one launch.

Three kernels, narrowest first (the engine picks the narrowest that applies):
- full batch: row i of k/v goes to (block[i], pos[0]): every sequence at the same position (equal lengths);
- identity batch: row i goes to (block[i], pos[i]);
- general: row batch_idx[i] goes to (block[i], pos[i]) (a subset of the batch, e.g. around a slow path).
`kv_append_reference` is the plain-torch version they are tested against.
"""

from __future__ import annotations

import functools

MODE_GENERAL, MODE_FULL_BATCH, MODE_IDENTITY = 0, 1, 2


def kv_append_reference(k_cache, v_cache, k, v, block, pos, batch_idx=None) -> None:
    """k_cache/v_cache [N, H, BLOCK, D]; k/v [B, H, D]; block, pos [R]; batch_idx [R] (rows of k/v) or None."""
    src_k = k if batch_idx is None else k[batch_idx]
    src_v = v if batch_idx is None else v[batch_idx]
    k_cache[block, :, pos] = src_k
    v_cache[block, :, pos] = src_v


@functools.cache
def _get_kernel():
    """The kernel, compiled on first use: importing this module needs no Triton (the CPU engine never calls it)."""
    import triton
    import triton.language as tl

    @triton.jit
    def kv_append_kernel(
        k_ptr, v_ptr, kc_ptr, vc_ptr, batch_idx_ptr, block_ptr, pos_ptr,
        stride_kb, stride_kh, stride_vb, stride_vh,
        stride_cn, stride_ch, stride_cp,
        D, MODE: tl.constexpr, BLOCK_D: tl.constexpr,
    ):  # fmt: skip
        row = tl.program_id(0)  # one program per (row, head)
        h = tl.program_id(1)
        if MODE == 0:
            src = tl.load(batch_idx_ptr + row)
        else:
            src = row
        block = tl.load(block_ptr + row)
        if MODE == 1:
            pos = tl.load(pos_ptr)
        else:
            pos = tl.load(pos_ptr + row)
        d = tl.arange(0, BLOCK_D)
        mask = d < D
        dst = block.to(tl.int64) * stride_cn + h * stride_ch + pos.to(tl.int64) * stride_cp + d
        kv = tl.load(k_ptr + src.to(tl.int64) * stride_kb + h * stride_kh + d, mask=mask)
        tl.store(kc_ptr + dst, kv, mask=mask)
        vv = tl.load(v_ptr + src.to(tl.int64) * stride_vb + h * stride_vh + d, mask=mask)
        tl.store(vc_ptr + dst, vv, mask=mask)

    return kv_append_kernel


def kv_append_triton(k_cache, v_cache, k, v, block, pos, batch_idx=None, mode: int | None = None) -> None:
    """The Triton kernels; `mode` defaults to the narrowest one the arguments allow."""
    import triton

    assert k_cache.is_contiguous() and v_cache.is_contiguous() and k.stride(-1) == 1 and v.stride(-1) == 1
    rows = block.shape[0]
    if rows == 0:
        return
    if mode is None:
        mode = MODE_GENERAL if batch_idx is not None else MODE_IDENTITY
    if mode == MODE_GENERAL and batch_idx is None:
        raise ValueError("the general kernel needs batch_idx")
    _, h, _, d = k_cache.shape
    _get_kernel()[(rows, h)](
        k, v, k_cache, v_cache,
        batch_idx if batch_idx is not None else block, block, pos,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2),
        d, MODE=mode, BLOCK_D=triton.next_power_of_2(d),
    )  # fmt: skip
