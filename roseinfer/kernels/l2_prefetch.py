"""The next layer's weights streamed into L2 while this layer runs (Hopper and later, inside a captured step).

At batch 1 a GPT-2 small layer reads 14.2 MB of weights (4.8 us at the H100's copy bandwidth) and takes about
15 us on the GPU: most of a layer is the latency of its five dependent kernels (the attention moves almost no
bytes, and every kernel waits for the one before; docs/BENCHMARKS.md, issue 27), and HBM sits idle meanwhile. A
kernel on a second stream of the graph, forked at the start of layer l, issues `cp.async.bulk.prefetch.L2` for
all of layer l + 1's weights: the copy engine of each SM it runs on pulls them into L2 (50 MB on the H100) at
HBM speed while layer l's chain runs, and layer l + 1's GEMVs then load from L2. A prefetch is only a hint: it
reads weights, writes nothing and changes no result, so it needs no ordering beyond the fork.

`WeightPrefetch` holds each layer's chunk table (16-byte-aligned addresses and sizes, built once) and the side
stream; `prefetch_scope` makes it the one `prefetch_weights(i)` (called by the model at each layer's start)
launches from. With no scope open `prefetch_weights` does nothing, so the model runs unchanged elsewhere.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools

import torch

CHUNK_BYTES = 16 * 1024  # one bulk prefetch: a whole layer is ~900 of them, spread over ~30 programs
THREADS = 32  # one warp a program, one chunk a thread

_ACTIVE: contextvars.ContextVar[WeightPrefetch | None] = contextvars.ContextVar("roseinfer_l2", default=None)


def l2_prefetch_supported() -> bool:
    """Triton on a CUDA device of compute capability 9.0 or later (`cp.async.bulk.prefetch` is sm_90+)."""
    from roseinfer.kernels import triton_available

    return triton_available() and torch.cuda.get_device_capability()[0] >= 9


def chunk_table(
    tensors: list[torch.Tensor], limit_bytes: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(addresses [C] int64, sizes [C] int32) covering each tensor's storage in CHUNK_BYTES pieces, in order, at
    most `limit_bytes` in all. Sizes are multiples of 16 (a bulk prefetch's rule); a tensor's last few bytes
    beyond a multiple of 16 are left out (a prefetch is a hint)."""
    addrs, sizes, left = [], [], limit_bytes
    for t in tensors:
        assert t.is_contiguous() and t.data_ptr() % 16 == 0, "weights are contiguous and 16-byte aligned"
        nbytes = t.numel() * t.element_size()
        if left is not None:
            nbytes, left = min(nbytes, left), left - min(nbytes, left)
        for off in range(0, nbytes - nbytes % 16, CHUNK_BYTES):
            addrs.append(t.data_ptr() + off)
            sizes.append(min(CHUNK_BYTES, nbytes - nbytes % 16 - off))
    device = tensors[0].device
    return torch.tensor(addrs, dtype=torch.int64, device=device), torch.tensor(
        sizes, dtype=torch.int32, device=device
    )


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def l2_prefetch_kernel(addr_ptr, size_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)  # [BLOCK]: one chunk a thread
        addr = tl.load(addr_ptr + offs, mask=offs < n, other=0)  # [BLOCK] int64
        size = tl.load(size_ptr + offs, mask=offs < n, other=0)  # [BLOCK] int32, 0 past the table
        # Fire and forget: the copy engine fetches the chunk into L2; nothing waits for it, and a chunk of size 0
        # (past the table's end) issues nothing. The dummy result keeps the statement in the kernel.
        tl.inline_asm_elementwise(
            "{ .reg .pred p; setp.ne.u32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $2; mov.u32 $0, 0; }",
            "=r,l,r",
            [addr, size],
            dtype=tl.int32,
            is_pure=False,
            pack=1,
        )

    return l2_prefetch_kernel


def prefetch_chunks(addrs: torch.Tensor, sizes: torch.Tensor) -> None:
    """Launch the bulk prefetches of one chunk table on the current stream."""
    n = addrs.numel()
    _kernel()[(-(-n // THREADS),)](addrs, sizes, n, BLOCK=THREADS, num_warps=THREADS // 32)


class WeightPrefetch:
    """Per layer, its weights' chunk table; entry n_layer is the lm_head's first `lm_head_bytes` (prefetched
    during the last layer). `stream`: the side stream the prefetches run on, forked from the capturing one."""

    def __init__(self, model: torch.nn.Module, lm_head_bytes: int = 0) -> None:
        self.stream = torch.cuda.Stream()
        self.tables = [
            chunk_table([b.c_attn.weight, b.attn_proj.weight, b.c_fc.weight, b.mlp_proj.weight])
            for b in model.h
        ]
        head = model.lm_head_weight if model.lm_head_weight is not None else model.wte.weight
        if lm_head_bytes > 0:
            self.tables.append(chunk_table([head], lm_head_bytes))
        self.forked = False

    def launch(self, index: int) -> None:
        """Fork the side stream from the current one and prefetch table `index` there (nothing past the last)."""
        if index >= len(self.tables):
            return
        main = torch.cuda.current_stream()
        self.stream.wait_stream(main)
        with torch.cuda.stream(self.stream):
            prefetch_chunks(*self.tables[index])
        self.forked = True

    def join(self) -> None:
        """The current stream waits for the prefetches (a captured graph must join every stream it forked)."""
        if self.forked:
            torch.cuda.current_stream().wait_stream(self.stream)
            self.forked = False


@contextlib.contextmanager
def prefetch_scope(prefetch: WeightPrefetch | None):
    """`prefetch_weights` launches from `prefetch` inside (None: nothing); its stream is joined on the way out."""
    token = _ACTIVE.set(prefetch)
    try:
        yield
    finally:
        _ACTIVE.reset(token)
        if prefetch is not None:
            prefetch.join()


def prefetch_weights(index: int) -> None:
    """Layer `index`'s weights (index n_layer: the lm_head's first bytes) into L2 from a side stream, where a
    scope is open; otherwise nothing."""
    prefetch = _ACTIVE.get()
    if prefetch is not None:
        prefetch.launch(index)
