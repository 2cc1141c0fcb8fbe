"""c_attn and the attention in one launch at decode batch 1: add + LayerNorm + the c_attn GEMV + split attention.

At batch 1 a captured step's kernels are latency-bound: each pays a kernel boundary (the previous grid drains,
the next one starts and its first loads go to DRAM) of a few microseconds, whatever it computes. Of a layer's five
kernels the attention's boundary was the dearest: launched plainly (as a programmatic dependent launch it was
slower, docs/BENCHMARKS.md, issue 27), after the c_attn GEMV that produces its q, k and v. Here both are one grid:
- programs 0 .. N_GEMV-1 are `roseinfer.kernels.gemv`'s one-row, one-shot GEMV with the add + LayerNorm
  prologue (`norm_gemv_triton`): each owns BLOCK_N columns of qkv [3, H, D], which lie in one head. Having
  stored them, it adds 1 to its head's `ready` counter (a barrier, then a release atomic, so every thread's
  stores come before it);
- programs N_GEMV .. are the split attention (`roseinfer.kernels.split_attention`, one past block per slice,
  H * SPLITS programs): each first loads its slice's K and V block from DRAM, which does not depend on this step,
  so those loads overlap the GEMV; then it spins until its head's counter says all 3 * D / BLOCK_N of the
  head's GEMV programs have stored, reads q, k, v from L2 and runs the slice, merging as the split kernel does
  (the last slice to finish merges and resets both counters to 0 for the next launch).
The spin needs every GEMV program to make progress while attention programs wait: they have the lower program
ids, so the hardware dispatches all of them before any attention program (the assumption single-pass scans such
as CUB's decoupled look-back rest on); no GEMV program ever waits on anything in the grid.

Numerically it is the unfused pair: the GEMV rounds qkv to the activation dtype and the attention reads it back
in fp32, one block a slice, with the same arithmetic (the reductions' lane order follows the compiler's layout
for each kernel, so results agree to about an ulp of the activation dtype, not bit for bit). `norm_qkv_attention_reference` is the torch version it is
tested against; `fits` says where it applies (the engine falls back to the two kernels elsewhere).
"""

from __future__ import annotations

import functools

import torch

BLOCK_N = 2  # GEMV output columns per program (norm_gemv_triton's one-shot tile at one row)
_COUNTERS: dict[
    torch.device, torch.Tensor
] = {}  # device -> int32 [2, heads]: ready, merge tickets; left at 0


def fits(x, weight, k_cache, block_table) -> bool:
    """One row, the one-shot GEMV's K (<= 4,096), qkv laid out [3, H, D] over c_attn's rows with D a multiple of
    BLOCK_N (a program's columns in one head), and one slice per block of the table (the split kernel's choice
    at batch 1: `roseinfer.kernels.split_attention.pick_splits`)."""
    from roseinfer.kernels.split_attention import pick_splits

    heads, head_dim = k_cache.shape[1], k_cache.shape[3]
    width = block_table.shape[1]
    return (
        x.shape[0] == 1
        and x.shape[1] <= 4096
        and weight.shape == (3 * heads * head_dim, x.shape[1])
        and head_dim % BLOCK_N == 0
        and pick_splits(1, heads, width) == width
    )


def norm_qkv_attention_reference(
    x,
    delta,
    ln_weight,
    ln_bias,
    eps: float,
    weight,
    bias,
    k_cache,
    v_cache,
    block_table,
    past_lens,
    scale: float,
):
    """(s, o): s = x + delta [1, C]; qkv = LayerNorm(s) @ weight^T + bias, rounded to x's dtype, viewed [3, H, D];
    o [1, H * D] = attention of q over the past (block table [1, M], past_lens [1]) and the new k, v, which are
    written to their slot (token `past`) of k_cache / v_cache [NB, H, BLOCK, D]."""
    from roseinfer.attention import paged_decode_attention
    from roseinfer.kernels.gemv import norm_gemv_reference

    heads, head_dim = k_cache.shape[1], k_cache.shape[3]
    s, qkv = norm_gemv_reference(x, delta, ln_weight, ln_bias, eps, weight, bias)
    q, k, v = qkv.view(1, 3, heads, head_dim).unbind(1)  # each [1, H, D]
    o = paged_decode_attention(
        q.float(), k.float(), v.float(), k_cache.float(), v_cache.float(), block_table, past_lens, scale
    )  # [1, H, D]
    past = int(past_lens[0])
    bs = k_cache.shape[2]
    blk = int(block_table[0, past // bs])
    k_cache[blk, :, past % bs] = k[0]
    v_cache[blk, :, past % bs] = v[0]
    return s, o.to(x.dtype).reshape(1, heads * head_dim)


def _counters(device: torch.device, heads: int) -> torch.Tensor:
    buf = _COUNTERS.get(device)
    if buf is None or buf.shape[1] < heads:
        buf = torch.zeros(2, max(heads, 64), dtype=torch.int32, device=device)
        _COUNTERS[device] = buf
    return buf


@functools.cache
def _get_kernel():
    """The kernel, compiled on first use: importing this module needs no Triton (the CPU engine never calls it)."""
    import triton
    import triton.language as tl

    from roseinfer.kernels.pdl import gdc_functions

    gdc_wait, gdc_launch_dependents = gdc_functions()

    @triton.jit
    def norm_qkv_attention_kernel(
        x_ptr, d_ptr, lnw_ptr, lnb_ptr, s_ptr, w_ptr, b_ptr, qkv_ptr, eps, N, K, stride_wn,
        kc_ptr, vc_ptr, table_ptr, lens_ptr, out_ptr, part_ptr, stat_ptr, ready_ptr, count_ptr,
        stride_cn, stride_ch, stride_cp, scale, D, N_GEMV,
        HAS_BIAS: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK: tl.constexpr,
        BLOCK_D: tl.constexpr, SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr, PDL: tl.constexpr,
    ):  # fmt: skip
        pid = tl.program_id(0)
        hd = N // 3  # H * D: q, k, v each
        if pid < N_GEMV:
            # -- the GEMV: `roseinfer.kernels.gemv`'s one-shot tile with the add + LayerNorm prologue --
            rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)  # [BN]
            kk = tl.arange(0, BLOCK_K)  # [BK]
            nmask = rn < N
            kmask = kk < K
            w_rows = w_ptr + rn.to(tl.int64)[:, None] * stride_wn  # [BN, 1]
            w = tl.load(w_rows + kk[None, :], mask=nmask[:, None] & kmask[None, :], other=0.0)  # [BN, BK]
            lnw = tl.load(lnw_ptr + kk, mask=kmask, other=0.0).to(tl.float32)  # [BK]
            lnb = tl.load(lnb_ptr + kk, mask=kmask, other=0.0).to(tl.float32)
            if PDL:  # the weights are in flight; x and delta are the previous kernels' output
                gdc_wait()
                gdc_launch_dependents()
            xr = tl.load(x_ptr + kk, mask=kmask, other=0.0)
            dr = tl.load(d_ptr + kk, mask=kmask, other=0.0)
            sr = (xr.to(tl.float32) + dr.to(tl.float32)).to(s_ptr.dtype.element_ty)  # rounded as torch's add
            tl.store(s_ptr + kk, sr, mask=kmask & (pid == 0))
            sf = sr.to(tl.float32)
            mean = tl.sum(sf, 0) / K
            diff = tl.where(kmask, sf - mean, 0.0)
            rstd = 1.0 / tl.sqrt(tl.sum(diff * diff, 0) / K + eps)
            x1 = (diff * rstd * lnw + lnb).to(
                s_ptr.dtype.element_ty
            )  # [BK], as the LayerNorm kernel writes it
            out = tl.sum(w.to(tl.float32) * x1.to(tl.float32)[None, :], axis=1)  # [BN]
            if HAS_BIAS:
                out += tl.load(b_ptr + rn, mask=nmask, other=0.0).to(tl.float32)
            tl.store(qkv_ptr + rn, out.to(qkv_ptr.dtype.element_ty), mask=nmask)
            tl.debug_barrier()  # every thread's stores before the count (the atomic releases them)
            head = (pid * BLOCK_N % hd) // D
            tl.atomic_add(ready_ptr + head, 1, sem="release", scope="gpu")
        else:
            # -- the attention: slice sp (past block sp) of head h, as `split_decode_kernel` with one block a slice
            a = pid - N_GEMV
            h = a // SPLITS
            sp = a % SPLITS
            if PDL:  # nothing here reads the previous kernel's output: release the next kernel at once
                gdc_launch_dependents()
            past = tl.load(lens_ptr)
            n_blocks = tl.cdiv(past, BLOCK)
            active = tl.maximum(1, n_blocks)  # slices with work; slice 0 also holds the new token
            if sp < active:
                d = tl.arange(0, BLOCK_D)
                dmask = d < D
                offs = tl.arange(0, BLOCK)
                # this slice's past block, loaded while the GEMV programs run (written by earlier steps)
                blk = tl.load(table_ptr + sp, mask=sp < n_blocks, other=0).to(tl.int64)
                pmask = (sp * BLOCK + offs) < past  # [BLOCK]; none for slice 0 of an empty past
                base = blk * stride_cn + h * stride_ch + offs[:, None] * stride_cp + d[None, :]
                tile_mask = pmask[:, None] & dmask[None, :]
                k_raw = tl.load(kc_ptr + base, mask=tile_mask, other=0.0)  # [BLOCK, D]
                v_raw = tl.load(vc_ptr + base, mask=tile_mask, other=0.0)
                # Wait until the head's 3 * D / BLOCK_N GEMV programs have stored q, k and v: spin on plain
                # (volatile) loads, which do not queue at L2's atomic unit behind the GEMV programs' increments,
                # then one acquire read, which orders this program's reads after their stores.
                want = 3 * D // BLOCK_N
                while tl.load(ready_ptr + h, volatile=True) < want:
                    pass
                tl.atomic_add(ready_ptr + h, 0, sem="acquire", scope="gpu")
                # .cg: at L2, where the other programs' stores are
                q = tl.load(qkv_ptr + h * D + d, mask=dmask, other=0.0, cache_modifier=".cg").to(tl.float32)
                kn_raw = tl.load(qkv_ptr + hd + h * D + d, mask=dmask, other=0.0, cache_modifier=".cg")
                vn_raw = tl.load(qkv_ptr + 2 * hd + h * D + d, mask=dmask, other=0.0, cache_modifier=".cg")
                own = sp == 0
                if own:  # the new token's K/V into its slot (position `past`), which no slice reads
                    slot_blk = tl.load(table_ptr + past // BLOCK).to(tl.int64)
                    slot = slot_blk * stride_cn + h * stride_ch + (past % BLOCK) * stride_cp + d
                    tl.store(kc_ptr + slot, kn_raw.to(kc_ptr.dtype.element_ty), mask=dmask)
                    tl.store(vc_ptr + slot, vn_raw.to(vc_ptr.dtype.element_ty), mask=dmask)
                # online softmax over the new token (slice 0) and the block; slice > 0 has a past token in it
                m = tl.where(own, tl.sum(q * kn_raw.to(tl.float32), 0) * scale, float("-inf"))
                l = tl.where(own, 1.0, 0.0)  # noqa: E741
                acc = tl.where(own, vn_raw.to(tl.float32), 0.0)  # [BLOCK_D]
                s = tl.where(pmask, tl.sum(k_raw.to(tl.float32) * q[None, :], 1) * scale, float("-inf"))
                m_new = tl.maximum(m, tl.max(s, 0))
                alpha = tl.exp(m - m_new)
                p = tl.exp(s - m_new)
                acc = acc * alpha + tl.sum(p[:, None] * v_raw.to(tl.float32), 0)
                l = l * alpha + tl.sum(p, 0)  # noqa: E741
                m = m_new
                o_ptrs = out_ptr + h * D + d
                if active == 1:  # one slice: the one-pass result, and the head is done
                    tl.store(o_ptrs, (acc / l).to(out_ptr.dtype.element_ty), mask=dmask)
                    tl.atomic_xchg(ready_ptr + h, 0)
                else:
                    tl.store(part_ptr + (h * SPLITS + sp) * BLOCK_D + d, acc)
                    tl.store(stat_ptr + (h * SPLITS + sp) * 2, m)
                    tl.store(stat_ptr + (h * SPLITS + sp) * 2 + 1, l)
                    tl.debug_barrier()  # all of this program's stores before its ticket
                    ticket = tl.atomic_add(count_ptr + h, 1, sem="acq_rel", scope="gpu")
                    if ticket == active - 1:  # the last slice merges; every active slice is past its spin
                        r = tl.arange(0, SPLITS_P2)
                        rmask = r < active
                        row = h * SPLITS + r
                        ms = tl.load(
                            stat_ptr + row * 2, mask=rmask, other=float("-inf"), cache_modifier=".cg"
                        )
                        ls = tl.load(stat_ptr + row * 2 + 1, mask=rmask, other=0.0, cache_modifier=".cg")
                        parts = tl.load(
                            part_ptr + row[:, None] * BLOCK_D + d[None, :],
                            mask=rmask[:, None],
                            other=0.0,
                            cache_modifier=".cg",
                        )  # [SPLITS_P2, BLOCK_D]
                        m_all = tl.max(ms, 0)  # finite: slice 0 holds the new token
                        wts = tl.exp(ms - m_all)  # [SPLITS_P2]; 0 for the masked ones
                        o = tl.sum(parts * wts[:, None], 0) / tl.sum(ls * wts, 0)
                        tl.store(o_ptrs, o.to(out_ptr.dtype.element_ty), mask=dmask)
                        tl.atomic_xchg(count_ptr + h, 0)
                        tl.atomic_xchg(ready_ptr + h, 0)

    return norm_qkv_attention_kernel


def norm_qkv_attention_triton(
    x, delta, ln_weight, ln_bias, eps: float, weight, bias, k_cache, v_cache, block_table, past_lens, scale: float,
    pdl: bool | None = None, num_warps: int = 4,
):  # fmt: skip
    """Same contract as `norm_qkv_attention_reference`, one launch (`fits` must hold). pdl: launch as a
    programmatic dependent launch (None: as the current scope says, `roseinfer.kernels.pdl`)."""
    import triton

    from roseinfer.kernels.pdl import pdl_enabled, pdl_supported

    assert fits(x, weight, k_cache, block_table)
    assert x.stride(1) == 1 and delta.shape == x.shape and delta.stride(1) == 1 and weight.is_contiguous()
    assert k_cache.is_contiguous() and v_cache.is_contiguous() and block_table.stride(1) == 1
    assert bias is None or (bias.shape == (weight.shape[0],) and bias.is_contiguous())
    n, k = weight.shape
    heads, block, head_dim = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    splits = block_table.shape[1]
    block_d = triton.next_power_of_2(head_dim)
    s = torch.empty_like(x)  # [1, C]
    qkv = torch.empty(n, dtype=x.dtype, device=x.device)  # [3 * H * D]
    out = torch.empty(1, heads * head_dim, dtype=x.dtype, device=x.device)  # [1, H * D]
    part = torch.empty(heads, splits, block_d, dtype=torch.float32, device=x.device)  # [H, SPLITS, BLOCK_D]
    stat = torch.empty(heads, splits, 2, dtype=torch.float32, device=x.device)  # [H, SPLITS, (m, l)]
    counters = _counters(x.device, heads)
    pdl = (pdl_enabled() if pdl is None else pdl) and pdl_supported()
    n_gemv = -(-n // BLOCK_N)
    _get_kernel()[(n_gemv + heads * splits,)](
        x, delta, ln_weight, ln_bias, s, weight, bias if bias is not None else weight, qkv, eps, n, k,
        weight.stride(0), k_cache, v_cache, block_table, past_lens, out, part, stat, counters[0], counters[1],
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), scale, head_dim, n_gemv,
        HAS_BIAS=bias is not None, BLOCK_N=BLOCK_N, BLOCK_K=triton.next_power_of_2(k), BLOCK=block,
        BLOCK_D=block_d, SPLITS=splits, SPLITS_P2=triton.next_power_of_2(splits), PDL=pdl,
        num_warps=num_warps, launch_pdl=pdl,
    )  # fmt: skip
    return s, out
