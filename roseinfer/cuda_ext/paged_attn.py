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


# The probe build's define (`paged_attn.cu`: its kernel can skip its wait for the kernel in front)
PROBE_SKIP_WAIT_DEFINE = "PAGED_ATTN_PROBE_SKIP_WAIT"


def load(probe_skip_wait: bool = False):
    """The built extension (None where it is not built: `roseinfer.cuda_ext.why_not_built`). probe_skip_wait: the
    probe build instead, whose `set_probe_skip_wait(True)` lets the kernel run without waiting for c_attn (a
    measurement's bound, scripts/bench_graph_step.py; its output is then not a result: it reads q, k and v before
    c_attn writes them)."""
    from roseinfer import cuda_ext

    return cuda_ext.load(NAME, (PROBE_SKIP_WAIT_DEFINE,) if probe_skip_wait else (), MIN_ARCH)


def _rows_fit(t, q) -> bool:
    """A [B, H, 64] float16 operand on q's device whose rows the kernel reads 16 bytes at a time."""
    import torch

    return (
        t.device == q.device
        and t.dtype == torch.float16
        and t.dim() == 3
        and tuple(t.shape) == (q.shape[0], q.shape[1], HEAD_DIM)
        and t.stride(2) == 1
        and t.data_ptr() % 16 == 0
        and t.stride(0) % 8 == 0
        and t.stride(1) % 8 == 0
    )


def fits(q, k_new, v_new, k_cache, v_cache, block_table, past_lens) -> bool:
    """Whether the kernel takes these operands (and is built), as its launcher checks them: float16 q, k_new, v_new
    [B, H, 64] with 16-byte aligned rows (views of one projection are) and caches [N, H, 64, 64] (contiguous), a
    table [B, M] with unit column stride and lengths [B] of one integer type (int64 or int32), all on one GPU."""
    import torch

    if not q.is_cuda or q.dim() != 3 or not all(_rows_fit(t, q) for t in (q, k_new, v_new)):
        return False
    for cache in (k_cache, v_cache):
        if cache.device != q.device or cache.dtype != torch.float16 or not cache.is_contiguous():
            return False
        if (
            cache.dim() != 4
            or tuple(cache.shape[1:]) != (q.shape[1], BLOCK, HEAD_DIM)
            or cache.data_ptr() % 16
        ):
            return False
    if block_table.dtype != past_lens.dtype or block_table.dtype not in (torch.int64, torch.int32):
        return False
    if block_table.device != q.device or past_lens.device != q.device:
        return False
    if block_table.dim() != 2 or block_table.shape[0] != q.shape[0] or block_table.stride(1) != 1:
        return False
    if past_lens.numel() != q.shape[0] or not past_lens.is_contiguous():
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
    module = load()
    if module is None:
        from roseinfer import cuda_ext

        raise RuntimeError(f"paged_attn: {cuda_ext.why_not_built(NAME)} (callers check `fits` first)")
    out = torch.empty_like(q)  # [B, H, D]
    module.paged_attn(
        q, k_new, v_new, k_cache, v_cache, block_table, past_lens, out, float(scale), append, stages, pdl
    )
    return out
