"""Split-context paged-attention decode (flash-decoding) in one launch, for small batches.

`roseinfer.kernels.paged_attention` runs one program per (sequence, head) that walks its past blocks one after
the other. At batch 1 that is 12 programs on a 132-SM H100, each paying a DRAM round trip per block in series:
~6 us a layer at short context and ~13 us at 512 past tokens (docs/BENCHMARKS.md, issue 27). Here the past is
cut into SPLITS slices of whole blocks, one program per (sequence, head, slice):
- each program runs the same online softmax over its slice (slice 0 starting from the new token, as the one-pass
  kernel does) and stores a partial (max m, normaliser l, weighted sum acc [D]) in fp32;
- it then takes a ticket from a per-(sequence, head) counter (an atomic add after a barrier, so every thread's
  partial stores are ordered before it); the program that takes the last ticket merges the partials, writes
  the output and sets the counter
  back to 0, so the next launch (the next layer, the next graph replay) finds it zeroed; where one slice is
  active (a past of at most one slice's blocks) it writes the output itself, as the one-pass kernel would;
- slices past a sequence's length do nothing (not even a ticket): a sequence of p past tokens has
  max(1, ceil(ceil(p / BLOCK) / blocks_per_split)) active slices, and the counter waits for those only.
So the reduce needs no second kernel, and the grid is fixed by the table's width, as a captured graph needs.
`append=True` writes the new token's K/V into its slot (slice 0 does it; no slice reads that slot).

Launched as a programmatic dependent launch (`roseinfer.kernels.pdl`) that waits first, the kernel gains nothing
and slows the step (its programs sit on SMs the GEMV before is using). Where each slice is exactly one block and
the batch is small (`pick_prefetch`), it instead loads its slice's block (table entry, K and V tiles) before it
waits: the past was written by earlier steps and the lengths and tables before the graph's first kernel, so the
DRAM round trip that started every slice now overlaps c_attn's GEMV (`prefetch`; on the H100 a batch-1 step
264 -> 232 us a graph replay, docs/BENCHMARKS.md, issue 27 round 3).

The counters live in one zeroed int32 buffer per device, grown when a call needs more (`_counters`); the CUDA
graph's warm-up runs make it before capture. The torch reference is `roseinfer.attention.paged_decode_attention`.
"""

from __future__ import annotations

import functools

import torch

# device -> int32 counters, one per (sequence, head); every launch leaves them at 0
_COUNTERS: dict[torch.device, torch.Tensor] = {}
# From this many (sequence, head) pairs the one-pass kernel runs: on the H100 (docs/BENCHMARKS.md, issue 27) at
# batch 8 (96 pairs) the split made 128 past tokens 17 us a step slower (and 512 58 us faster); at batches 1 and 2
# it was no slower at 128 and faster beyond.
ONE_PASS_FROM = 64
# From this many pairs (GPT-2 small: batch 4) a past of at most SERIAL_BLOCKS blocks is walked by slice 0 alone
# (the one-pass kernel's work, no merge). On the H100 (docs/BENCHMARKS.md, issue 27 round 2), 128 past tokens (2
# blocks): at batch 4 the split was 8 to 11 us a step slower than the one-pass kernel (with 48 pairs of two blocks
# the merge's round trips cost more than the second block they parallelise), this rule 0.7 us faster on average;
# at batch 2 the same rule was 29 us slower (not understood) and the plain split within 2.5 us of the one-pass
# kernel either way; at batch 1 the split no slower. From 192 tokens the split was faster at batches 1 to 4.
# The past is read at run time, so one captured graph holds both.
SERIAL_FROM = 48
SERIAL_BLOCKS = 2
# Up to this many (sequence, head) pairs, and for models up to this width (heads x head_dim), the engine's split
# attention, where each slice is one block, is launched as a dependent whose slices load their block before they
# wait (`pdl_attention_prefetch`). On the H100 (docs/BENCHMARKS.md, issue 27 round 3) a step was faster at GPT-2
# small batch 1 and 2 (12, 24 pairs: -24 to -32 us) and gpt2-medium batch 1 and 2 (16, 32 pairs: -38 to -58 us), and
# slower for gpt2-xl at batch 1 (width 1600: +67 us at 128 past tokens, +215 at 512). Likely why (not verified):
# there c_attn's one-shot GEMV is 2,400 programs of 4 warps, more than the SMs hold at once, and the attention's
# early programs take the slots its second wave needs; at widths up to 1,024 it is one wave of 2-warp programs.
PREFETCH_MAX_PAIRS = 32
PREFETCH_MAX_WIDTH = 1024
# At most this many programs in a launch (slices beyond a sequence's length exit at once, but not for free).
MAX_PROGRAMS = 4096


def pick_splits(batch: int, heads: int, max_blocks: int) -> int:
    """Slices of the past per (sequence, head): one block each where the grid stays under MAX_PROGRAMS (a slice
    of one block is the shortest chain of DRAM round trips; slices past a sequence's length exit at once, and a
    sequence of one block's past takes no merge at all). 1: the one-pass kernel (from ONE_PASS_FROM pairs).
    On the H100 (docs/BENCHMARKS.md, issue 27) slices of two blocks at batch 2 made 128 past tokens slower: one
    active slice, and the merge's round trips on top."""
    pairs = max(1, batch * heads)
    if pairs >= ONE_PASS_FROM:
        return 1
    return max(1, min(max_blocks, MAX_PROGRAMS // pairs))


def pick_serial_blocks(batch: int, heads: int) -> int:
    """Pasts of at most this many blocks run unsplit in the split kernel (slice 0 walks them; 0: none)."""
    return SERIAL_BLOCKS if batch * heads >= SERIAL_FROM else 0


def pick_prefetch(
    batch: int, heads: int, head_dim: int, splits: int, blocks: int, serial_blocks: int
) -> bool:
    """Whether slices load their block before the wait (`pdl_attention_prefetch`): one block a slice (`splits`
    equal to the table's `blocks`), every past split (no serial walk), few enough pairs and a narrow enough model
    (PREFETCH_MAX_PAIRS, PREFETCH_MAX_WIDTH)."""
    return (
        splits == blocks
        and serial_blocks == 0
        and batch * heads <= PREFETCH_MAX_PAIRS
        and heads * head_dim <= PREFETCH_MAX_WIDTH
    )


def _counters(device: torch.device, n: int) -> torch.Tensor:
    buf = _COUNTERS.get(device)
    if buf is None or buf.numel() < n:
        buf = torch.zeros(max(n, 1024), dtype=torch.int32, device=device)
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
    def softmax_block(q, k, v, rows, m, l, acc, scale):  # noqa: E741
        """One past block into a slice's online softmax: q [BLOCK_D], k and v [BLOCK, BLOCK_D] in fp32, rows
        [BLOCK] the positions holding a past token. Returns the new (max m, normaliser l, weighted sum acc)."""
        s = tl.where(rows, tl.sum(k * q[None, :], 1) * scale, float("-inf"))  # [BLOCK]
        m_new = tl.maximum(m, tl.max(s, 0))
        alpha = tl.exp(m - m_new)
        p = tl.exp(s - m_new)
        return m_new, l * alpha + tl.sum(p, 0), acc * alpha + tl.sum(p[:, None] * v, 0)

    @triton.jit
    def split_decode_kernel(
        q_ptr, kn_ptr, vn_ptr, kc_ptr, vc_ptr, table_ptr, lens_ptr, out_ptr, part_ptr, stat_ptr, count_ptr,
        stride_qb, stride_qh, stride_nb, stride_nh, stride_cn, stride_ch, stride_cp, stride_tb, stride_ob, stride_oh,
        H, scale, D, BLOCK: tl.constexpr, BLOCK_D: tl.constexpr, SPLITS: tl.constexpr, SPLITS_P2: tl.constexpr,
        PER_SPLIT: tl.constexpr, SERIAL: tl.constexpr, STAGES: tl.constexpr, APPEND: tl.constexpr,
        PDL: tl.constexpr, PREFETCH: tl.constexpr,
    ):  # fmt: skip
        b = tl.program_id(0)
        h = tl.program_id(1)
        sp = tl.program_id(2)
        d = tl.arange(0, BLOCK_D)
        dmask = d < D
        offs = tl.arange(0, BLOCK)
        past = tl.load(lens_ptr + b)  # the step's inputs, staged before the graph's first kernel
        n_blocks = tl.cdiv(past, BLOCK)
        if PREFETCH:  # one block a slice: its past block (written by earlier steps) loaded before the wait
            pre_blk = tl.load(table_ptr + b * stride_tb + sp, mask=sp < n_blocks, other=0).to(tl.int64)
            pre_rows = (sp * BLOCK + offs) < past  # [BLOCK]; none for slice 0 of an empty past
            pre_mask = pre_rows[:, None] & dmask[None, :]  # [BLOCK, BLOCK_D]
            pre_base = pre_blk * stride_cn + h * stride_ch + offs[:, None] * stride_cp + d[None, :]
            pre_k = tl.load(kc_ptr + pre_base, mask=pre_mask, other=0.0)
            pre_v = tl.load(vc_ptr + pre_base, mask=pre_mask, other=0.0)
        if PDL:  # roseinfer.kernels.pdl: q, k, v are the previous kernel's output
            gdc_wait()
            gdc_launch_dependents()
        # slices with work; at least slice 0, which walks a past of at most SERIAL blocks alone
        active = tl.where(n_blocks <= SERIAL, 1, tl.maximum(1, tl.cdiv(n_blocks, PER_SPLIT)))
        if sp < active:
            bh = b * H + h
            q = tl.load(q_ptr + b * stride_qb + h * stride_qh + d, mask=dmask, other=0.0).to(tl.float32)
            kn_raw = tl.load(kn_ptr + b * stride_nb + h * stride_nh + d, mask=dmask, other=0.0)
            vn_raw = tl.load(vn_ptr + b * stride_nb + h * stride_nh + d, mask=dmask, other=0.0)
            if APPEND:
                if sp == 0:  # the new token's K/V into its slot (position `past`), which no slice reads
                    slot_blk = tl.load(table_ptr + b * stride_tb + past // BLOCK).to(tl.int64)
                    slot = slot_blk * stride_cn + h * stride_ch + (past % BLOCK) * stride_cp + d
                    tl.store(kc_ptr + slot, kn_raw.to(kc_ptr.dtype.element_ty), mask=dmask)
                    tl.store(vc_ptr + slot, vn_raw.to(vc_ptr.dtype.element_ty), mask=dmask)
            # This slice's online softmax: max m, normaliser l, weighted sum acc [D]. Slice 0 starts from the new
            # token (as the one-pass kernel does), the others from nothing; every active slice's first block holds
            # a past token, so m is finite once it is read.
            own = sp == 0
            m = tl.where(own, tl.sum(q * kn_raw.to(tl.float32), 0) * scale, float("-inf"))
            l = tl.where(own, 1.0, 0.0)  # noqa: E741
            acc = tl.where(own, vn_raw.to(tl.float32), 0.0)  # [BLOCK_D]
            first = sp * PER_SPLIT
            last = tl.where(active == 1, n_blocks, tl.minimum(first + PER_SPLIT, n_blocks))
            if PREFETCH:  # the one block, already loaded
                k, v = pre_k.to(tl.float32), pre_v.to(tl.float32)  # [BLOCK, BLOCK_D] each
                m, l, acc = softmax_block(q, k, v, pre_rows, m, l, acc, scale)  # noqa: E741
                last = first  # no loop
            for i in tl.range(first, last, num_stages=STAGES):
                blk = tl.load(table_ptr + b * stride_tb + i).to(tl.int64)
                pmask = (i * BLOCK + offs) < past
                base = blk * stride_cn + h * stride_ch + offs[:, None] * stride_cp + d[None, :]
                tile_mask = pmask[:, None] & dmask[None, :]
                k = tl.load(kc_ptr + base, mask=tile_mask, other=0.0).to(tl.float32)  # [BLOCK, D]
                v = tl.load(vc_ptr + base, mask=tile_mask, other=0.0).to(tl.float32)
                m, l, acc = softmax_block(q, k, v, pmask, m, l, acc, scale)  # noqa: E741
            o_ptrs = out_ptr + b * stride_ob + h * stride_oh + d
            if active == 1:  # one slice (past <= PER_SPLIT or SERIAL blocks): the one-pass kernel's result
                tl.store(o_ptrs, (acc / l).to(out_ptr.dtype.element_ty), mask=dmask)
            else:
                # The partial: acc in part [B*H, SPLITS, BLOCK_D], (m, l) in stat [B*H, SPLITS, 2]
                tl.store(part_ptr + (bh * SPLITS + sp) * BLOCK_D + d, acc)
                tl.store(stat_ptr + (bh * SPLITS + sp) * 2, m)
                tl.store(stat_ptr + (bh * SPLITS + sp) * 2 + 1, l)
                tl.debug_barrier()  # all of this program's stores before its ticket (the atomic releases them)
                ticket = tl.atomic_add(count_ptr + bh, 1, sem="acq_rel", scope="gpu")
                if ticket == active - 1:  # the last slice to finish merges them all
                    r = tl.arange(0, SPLITS_P2)
                    rmask = r < active
                    # .cg: read at L2, where the other programs' stores are, never a stale L1 line
                    ms = tl.load(
                        stat_ptr + (bh * SPLITS + r) * 2,
                        mask=rmask,
                        other=float("-inf"),
                        cache_modifier=".cg",
                    )
                    ls = tl.load(
                        stat_ptr + (bh * SPLITS + r) * 2 + 1, mask=rmask, other=0.0, cache_modifier=".cg"
                    )
                    parts = tl.load(
                        part_ptr + (bh * SPLITS + r[:, None]) * BLOCK_D + d[None, :],
                        mask=rmask[:, None],
                        other=0.0,
                        cache_modifier=".cg",
                    )  # [SPLITS_P2, BLOCK_D]
                    m_all = tl.max(ms, 0)  # finite: slice 0 holds the new token
                    w = tl.exp(ms - m_all)  # [SPLITS_P2]; 0 for the masked ones
                    out = tl.sum(parts * w[:, None], 0) / tl.sum(ls * w, 0)
                    tl.store(o_ptrs, out.to(out_ptr.dtype.element_ty), mask=dmask)
                    tl.atomic_xchg(
                        count_ptr + bh, 0
                    )  # every active slice has taken its ticket: ready for reuse

    return split_decode_kernel


def split_decode_attention_triton(
    q,
    k_new,
    v_new,
    k_cache,
    v_cache,
    block_table,
    past_lens,
    scale: float,
    splits: int,
    num_warps: int = 4,
    num_stages: int = 2,
    append: bool = False,
    serial_blocks: int = 0,
    prefetch: bool | None = None,
):
    """Same contract as `roseinfer.kernels.paged_attention.paged_decode_attention_triton`, the past cut into
    `splits` slices of whole blocks (the table's width M divided evenly; `pick_splits` chooses); a sequence whose
    past spans at most `serial_blocks` blocks is walked by its slice 0 alone (`pick_serial_blocks` chooses).
    prefetch: load each slice's block before waiting for the kernel before (one block a slice only; None: where
    the current scope asks for it, `roseinfer.kernels.pdl.pdl_attention_prefetch`, and `pick_prefetch` says so);
    within a PDL scope it is then launched as a dependent."""
    import triton

    from roseinfer.kernels.pdl import pdl_attention_prefetch, pdl_attention_release, pdl_enabled

    b, h, d = q.shape
    assert k_cache.is_contiguous() and v_cache.is_contiguous() and block_table.stride(1) == 1
    width = block_table.shape[1]
    per_split = max(1, -(-width // max(1, splits)))
    splits = max(1, -(-width // per_split))  # no slice that could never be active
    block_d = triton.next_power_of_2(d)
    out = torch.empty_like(q)  # [B, H, D]
    if b == 0:
        return out
    part = torch.empty(b * h, splits, block_d, dtype=torch.float32, device=q.device)  # [B*H, SPLITS, BLOCK_D]
    stat = torch.empty(b * h, splits, 2, dtype=torch.float32, device=q.device)  # [B*H, SPLITS, (m, l)]
    count = _counters(q.device, b * h)
    if prefetch is None:  # `pdl_scope(attention_prefetch=True)`, where `pick_prefetch` says
        prefetch = pdl_attention_prefetch() and pick_prefetch(b, h, d, splits, width, serial_blocks)
    assert not prefetch or (per_split == 1 and serial_blocks == 0)  # every active slice is exactly one block
    # launched as a dependent of the kernel before (`pdl_scope(attention=True)`), and always when prefetching:
    # loading the block before the wait gains only while the kernel before still runs
    pdl = pdl_enabled(attention=True) or (prefetch and pdl_enabled())
    release = pdl or pdl_attention_release()  # calls gdc_wait / gdc_launch_dependents
    _get_kernel()[(b, h, splits)](
        q, k_new, v_new, k_cache, v_cache, block_table, past_lens, out, part, stat, count,
        q.stride(0), q.stride(1), k_new.stride(0), k_new.stride(1),
        k_cache.stride(0), k_cache.stride(1), k_cache.stride(2), block_table.stride(0), out.stride(0), out.stride(1),
        h, scale, d, BLOCK=k_cache.shape[2], BLOCK_D=block_d, SPLITS=splits,
        SPLITS_P2=triton.next_power_of_2(splits), PER_SPLIT=per_split, SERIAL=serial_blocks, STAGES=num_stages,
        APPEND=append,
        PDL=release, PREFETCH=prefetch, num_warps=num_warps, launch_pdl=pdl,
    )  # fmt: skip
    return out
