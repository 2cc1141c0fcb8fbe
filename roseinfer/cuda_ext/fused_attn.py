"""The one-row attention half of a GPT-2 small block as one CUDA kernel (`fused_attn.cu`), a cluster of blocks per head.

At decode batch 1 the Triton path runs a block's attention half as three dependent kernels (the norm GEMV for
ln_1 + c_attn, the split paged attention with the KV append, the GEMV for attn_proj), each waiting for the whole
grid before it. This kernel runs it in one launch of 12 clusters of 8 blocks, one cluster per head: each block
computes 24 of its head's 192 q/k/v values and pushes them into its cluster's shared memory, attends over its
share of the past tokens (copied from the paged cache before the kernel's PDL wait), pushes its partial softmax
the same way, and adds its columns of attn_proj into a float32 buffer with atomics. The two dependencies inside
are a block waiting on its own mbarrier for the bytes its cluster pushes into it, not grid-wide waits; no head
waits for another. Its float32 output goes to the MLP kernel (`fused_mlp`, float32 delta) after it.

`AttnScratch` holds the output buffers, one per layer (`scratch.LayerScratch`): a launch adds into its layer's
buffer and zeroes the next layer's, whose last reader has finished by then.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from roseinfer.cuda_ext.scratch import LayerScratch, flat_stamps
from roseinfer.cuda_ext.stamps import phase_ranges as stamp_ranges
from roseinfer.kernels.split_sum import delta_rows, joined
from roseinfer.names import ATTN_ATTEND, ATTN_NORM, ATTN_PROJ, ATTN_QKV, ATTN_WAIT

NAME = "fused_attn"
KERNEL = "fused_attn_kernel"  # the CUDA function's name: the profilers' kernel names contain it
WIDTH = 768  # the one width built
HEAD_DIM = 64
CLUSTER = 8  # blocks per head
BLOCKS = WIDTH // HEAD_DIM * CLUSTER  # 96
MAX_TOKENS = CLUSTER * 128  # past + new tokens a launch attends over (GPT-2's 1,024 positions)
NSTAMP = (
    6  # stamps per block: start, after the wait, after ln_1, after c_attn's push, after the attention's, end
)
PHASES = (
    ("weights, past K/V and wait", ATTN_WAIT),  # loaded before the PDL wait
    ("ln_1", ATTN_NORM),  # the residual add and LayerNorm
    ("c_attn + push", ATTN_QKV),  # 24 q/k/v values a block, into the cluster's blocks; all 192 arrived
    ("attention + push", ATTN_ATTEND),  # this block's tokens' partial softmax, pushed; all 8 arrived
    ("combine + attn_proj", ATTN_PROJ),  # o from the partials, this block's columns of attn_proj (atomics)
)
DELAY_DEFINE = "FUSED_KERNEL_STAMP_DELAY"  # test builds only: a spin of delay_ns in phase 1 to 4
MIN_ARCH = (9, 0)  # clusters and griddepcontrol: sm_90 and later


def load(test_build: bool = False, defines: tuple[str, ...] = ()):
    """The built extension (None where it is not built: `roseinfer.cuda_ext.why_not_built`)."""
    from roseinfer import cuda_ext

    return cuda_ext.load(NAME, ((DELAY_DEFINE,) if test_build else ()) + tuple(defines), MIN_ARCH)


class AttnScratch(LayerScratch):
    """The kernel's output buffers, one per layer [n_layer, C], and its stamps [n_layer, BLOCKS, NSTAMP] where
    `stamps` (`scratch.LayerScratch`)."""

    def __init__(self, n_layer: int, device, stamps: bool = False) -> None:
        super().__init__("fused attention", n_layer, WIDTH, BLOCKS, NSTAMP, device, stamps)


def fused_attn_applies(x: torch.Tensor, delta: torch.Tensor, block, k_cache: torch.Tensor, past_lens: torch.Tensor,
                       n_positions: int, index=None) -> bool:  # fmt: skip
    """Whether `fused_attn` runs for this one-row step: x [1, C] float16 and delta [1, C] (float16, or float32: the
    MLP kernel's output, or its split sum [R, C], `roseinfer.kernels.split_sum`), or with `index` the embedding
    tables the first block gathers from; 12 heads of 64; the paged cache [N, 12, BLOCK, 64] float16; one sequence;
    at most MAX_TOKENS positions."""
    if index is None and not (x.shape == (1, WIDTH) and delta_rows(x, delta) and delta.is_contiguous()):
        return False
    if index is not None and not (
        x.shape[-1] == WIDTH and delta.shape[-1] == WIDTH and delta.dtype == x.dtype
    ):
        return False
    if not (x.is_cuda and x.dtype == torch.float16 and x.is_contiguous()):
        return False
    if (
        delta.dtype not in (torch.float16, torch.float32)
        or past_lens.shape != (1,)
        or n_positions > MAX_TOKENS
    ):
        return False
    if k_cache.dtype != torch.float16 or k_cache.shape[1] * HEAD_DIM != WIDTH or k_cache.shape[3] != HEAD_DIM:
        return False
    for lin, shape in ((block.c_attn, (3 * WIDTH, WIDTH)), (block.attn_proj, (WIDTH, WIDTH))):
        if lin.bias is None or lin.weight.shape != shape or not lin.weight.is_contiguous():
            return False
    from roseinfer import cuda_ext

    return cuda_ext.layer_norm_fits(block.ln_1, WIDTH) and load() is not None


def fused_attn(x, delta, ln, c_attn, attn_proj, k_cache, v_cache, table, past_len, scale, out, clear, stamps,
               pdl: bool = False, index=None, module=None, delay=(0, 0)):  # fmt: skip
    """(s [1, C] float16, out): s = x + delta, and attn_proj(attention(c_attn(ln(s)))) added into `out` (float32
    [C], zero on entry), the new token's k and v written into the cache at position past_len of `table` (int64
    [M], this layer's row); `clear` zeroed for the next launch; stamps: int64 [NSTAMP, BLOCKS] (contiguous, as
    `AttnScratch.for_layer` gives it) or empty. index: (token ids [1], positions [1]) when x and delta are the
    embedding tables. module: the built extension (default `load()`; a test build for planted delays); delay:
    (phase, ns) in a test build."""
    from roseinfer import cuda_ext

    module = module or load()
    s = torch.empty(1, WIDTH, dtype=x.dtype, device=x.device)  # [1, C]
    fold_w, fold_b = cuda_ext.ln_fold(ln, c_attn)  # [3C] each: ln_1 folded into c_attn, its bias in fold_b
    none = torch.empty(0, dtype=torch.int64, device=x.device)
    rows = index if index is not None else (none, none)
    module.fused_attn(
        x, delta, rows[0], rows[1], ln.weight, ln.bias, ln.eps, c_attn.weight, fold_w, fold_b, attn_proj.weight,
        attn_proj.bias, k_cache, v_cache, table, past_len, scale, s, out, clear, flat_stamps(stamps, NSTAMP, BLOCKS),
        pdl, delay[0], delay[1],
    )  # fmt: skip
    return s, out


def block_attention(x, delta, block, layer: int, kv, scratch: AttnScratch, pdl: bool = False, index=None):
    """A GPT-2 block's attention half as `fused_attn` into layer `layer`'s buffer of `scratch`, reading and
    writing the cache of `kv` (a `StaticDecodeKV` of one sequence): (s [1, C], out [1, C] float32, valid until
    the same layer's next launch)."""
    out, clear, stamps = scratch.for_layer(layer)
    scratch.launched = True
    table = kv.block_tables[layer][0]  # [M], contiguous: this layer's row of the one sequence
    s, out = fused_attn(
        x, delta, block.ln_1, block.c_attn, block.attn_proj, kv.cache.k_caches[layer], kv.cache.v_caches[layer],
        table, kv.past_lens, kv.scale, out, clear, stamps, pdl, index,
    )  # fmt: skip
    return s, out.view(1, -1)


def fused_attn_reference(x, delta, ln, c_attn, attn_proj, k_cache, v_cache, table, past: int, scale: float):
    """(s, out, k, v) in torch, rounded where the kernel rounds (s, q/k/v and o in float16; out float32; the
    LayerNorm's output float32, as the kernel folds it into c_attn's dot products and never stores it:
    `cuda_ext.ln_fold`): x, delta [1, C] (or a split sum); the past tokens read from the cache through `table` [M];
    k, v [H, D] the new token's (which the kernel writes at position `past`)."""
    h_n = k_cache.shape[1]
    s = (x.float() + joined(x, delta).float()).to(x.dtype)  # [1, C]
    h = F.layer_norm(s.float(), (s.shape[-1],), ln.weight.float(), ln.bias.float(), ln.eps)  # [1, C] float32
    qkv = F.linear(h.float(), c_attn.weight.float(), c_attn.bias.float()).to(x.dtype)  # [1, 3C]
    q, k, v = qkv.view(3, h_n, HEAD_DIM).unbind(0)  # [H, D] each
    bs = k_cache.shape[2]
    pos = torch.arange(past, device=x.device)
    blocks = table[pos // bs]  # [P]
    k_past = k_cache[blocks, :, pos % bs]  # [P, H, D]
    v_past = v_cache[blocks, :, pos % bs]
    keys = torch.cat([k_past, k[None]], 0).float()  # [P+1, H, D]
    values = torch.cat([v_past, v[None]], 0).float()
    scores = torch.einsum("hd,phd->hp", q.float(), keys) * scale  # [H, P+1]
    o = torch.einsum("hp,phd->hd", scores.softmax(-1), values).to(x.dtype)  # [H, D]
    out = F.linear(o.reshape(1, -1).float(), attn_proj.weight.float(), attn_proj.bias.float())  # [1, C]
    return s, out, k, v


def phase_ranges(stamps) -> list[tuple[str, str, int, int]]:
    """One launch's stamps [BLOCKS, NSTAMP] -> its phases' contiguous sub-ranges (`stamps.phase_ranges`)."""
    return stamp_ranges(stamps, PHASES)
