"""The paged-attention decode as a CUDA kernel whose past K/V comes in by bulk copy (`paged_attn.cu`).

Each (block, head) of the paged cache is one contiguous tile (64 tokens x 64 dims of float16, 8 KB for K and 8 KB
for V), which one `cp.async.bulk` brings into shared memory: a block of four warps per (sequence, head) keeps
`stages` such tiles in flight without issuing a load per thread, its warps splitting each tile's rows, each with
its own online softmax, merged at the end. As a programmatic dependent launch its first tiles load before it waits
for the kernel in front (c_attn), from the past length and block table the step staged before its first kernel.

Same contract and result as `roseinfer.kernels.paged_attention.paged_decode_attention_triton` (the Triton
one-pass kernel, which runs where this one does not fit or is switched off) and the torch reference
`roseinfer.attention.paged_decode_attention`.
"""

from __future__ import annotations

NAME = "paged_attn"
HEAD_DIM = 64  # the one head size built (every GPT-2)
BLOCK = 64  # tokens a cache block
MIN_ARCH = (9, 0)  # cp.async.bulk with an mbarrier, griddepcontrol: sm_90 and later
# Tiles in flight a (sequence, head), each stage 16 KB of shared memory: the built choices
STAGE_CHOICES = (1, 2, 3)
# From this many (sequence, head) pairs one tile in flight a block, below it two. A stage is what limits the blocks
# an SM holds (6 at two stages, 13 at one), and with many pairs more blocks beat a deeper pipeline: GPT-2 small's
# step on an H200 at batch 512 (6,144 pairs), pasts 64 / 128, 821.6 / 1,110.0 us a replay at one stage, 844.6 /
# 1,110.4 at two; batch 256 (3,072) 585.1 / 1,007.2 at one, 597.0 / 1,006.0 at two (pasts 64 / 256); batch 64
# (768) at a past of 256 417.7 at one, 400.5 at two (docs/BENCHMARKS.md, session 46).
ONE_STAGE_FROM = 3072


def pick_stages(pairs: int) -> int:
    """Tiles in flight a block for a launch of `pairs` (sequence, head) blocks."""
    return 1 if pairs >= ONE_STAGE_FROM else 2


def load():
    """The built extension (None where it is not built: `roseinfer.cuda_ext.why_not_built`)."""
    from roseinfer import cuda_ext

    return cuda_ext.load(NAME, (), MIN_ARCH)


def fits(q, k_cache, v_cache, block_table, past_lens) -> bool:
    """Whether the kernel takes these operands (and is built): float16 q [B, H, 64] and caches [N, H, 64, 64]
    (contiguous), a table [B, M] with unit column stride and lengths [B] of one integer type (int64 or int32)."""
    import torch

    if not q.is_cuda or q.dtype != torch.float16 or q.dim() != 3 or q.shape[2] != HEAD_DIM:
        return False
    for cache in (k_cache, v_cache):
        if cache.dtype != torch.float16 or tuple(cache.shape[1:]) != (q.shape[1], BLOCK, HEAD_DIM):
            return False
        if not cache.is_contiguous():
            return False
    if block_table.dtype != past_lens.dtype or block_table.dtype not in (torch.int64, torch.int32):
        return False
    if block_table.stride(1) != 1 or not past_lens.is_contiguous():
        return False
    return load() is not None


def paged_decode_attention_cuda(
    q,
    k_new,
    v_new,
    k_cache,
    v_cache,
    block_table,
    past_lens,
    scale: float,
    append: bool = False,
    stages: int | None = None,
    pdl: bool | None = None,
):
    """q, k_new, v_new [B, H, 64] float16; caches [N, H, 64, 64]; block_table [B, M]; past_lens [B] -> [B, H, 64].
    append: also write k_new, v_new into each sequence's slot (token `past`, which the table must cover). stages:
    tiles in flight a (sequence, head) (None: `pick_stages`'s). pdl: a
    programmatic dependent launch (None: where the current scope launches the attention so,
    `roseinfer.kernels.pdl.pdl_enabled(attention=True)`); the kernel waits for the kernel in front before it reads
    q, k_new and v_new, and releases the one after it as soon as it has waited."""
    import torch

    from roseinfer.kernels.pdl import pdl_enabled

    if stages is None:
        stages = pick_stages(q.shape[0] * q.shape[1])
    if stages not in STAGE_CHOICES:  # the built instantiations
        raise ValueError(f"paged_attn: stages must be one of {STAGE_CHOICES}, not {stages}")
    if pdl is None:
        pdl = pdl_enabled(attention=True)
    out = torch.empty_like(q)  # [B, H, D]
    load().paged_attn(
        q, k_new, v_new, k_cache, v_cache, block_table, past_lens, out, float(scale), append, stages, pdl
    )
    return out
