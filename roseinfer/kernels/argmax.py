"""Greedy tokens: the argmax of each row of the logits [B, V], in two Triton launches.

torch.argmax gives each row to one block of threads: at batch 64 and GPT-2's 50,257 logits that is 64 blocks on
132 SMs reading 6.4 MB, 13 us of a captured decode step on the H100 (docs/BENCHMARKS.md). Here each row is cut
into chunks: one program per (row, chunk) finds the chunk's max and its first index, a second launch picks
each row's winner. Ties go to the lowest index, as torch.argmax's do; the rows may be strided (the logits are a
slice of the padded lm_head's output). In a captured decode step the second launch also leaves the next step's
inputs (`advance`: the token ids, and the past lengths plus the live flags), which took a copy and an add of
their own (3 us of a batch-1 step on the H100), and can write the tokens into pinned host memory (`to_host`,
`roseinfer.host_tokens`), which took a copy after the step that the next step waited behind. After the one-row lm_head GEMV (a programmatic dependent launch,
`roseinfer.kernels.pdl`) both launch as dependents too (`pdl=True`): each waits before it reads, so their launches
overlap the kernel before.

At one row the lm_head GEMV can fold the argmax into its own programs instead (`LmHeadArgmax`): each logit is
packed with its column into an int64 word whose atomic max goes into one of a few hundred words, and one small
kernel (`argmax_words`) reads them, leaves the same outputs as the second kernel above, and resets the words for the
next step: no pass over the logits, one launch fewer.
"""

from __future__ import annotations

import functools

import torch


@functools.cache
def _get_kernels():
    """The kernels, compiled on first use: importing this module needs no Triton (the CPU engine never calls it)."""
    import triton
    import triton.language as tl

    from roseinfer.kernels.pdl import gdc_functions

    gdc_wait, gdc_launch_dependents = gdc_functions()

    @triton.jit
    def store_token(
        row, token, out_ptr, ids_ptr, past_ptr, live_ptr, host_ptr, host_stride, parity_ptr,
        ADVANCE: tl.constexpr, TO_HOST: tl.constexpr,
    ):  # fmt: skip
        """A row's token (int64) out, and where asked the next step's inputs and the host's copy."""
        tl.store(out_ptr + row, token)
        if ADVANCE:  # the next step's inputs: its token ids, and the past lengths grown by the live flags
            tl.store(ids_ptr + row, token.to(ids_ptr.dtype.element_ty))
            tl.store(past_ptr + row, tl.load(past_ptr + row) + tl.load(live_ptr + row))
        if TO_HOST:  # the token into pinned host memory, in the row its parity picks; the parity flips
            p = tl.load(parity_ptr + row)
            tl.store(host_ptr + p * host_stride + row, token)
            tl.store(parity_ptr + row, 1 - p)

    @triton.jit
    def argmax_chunks_kernel(
        x_ptr, stride_x, V, val_ptr, idx_ptr, CHUNKS, CHUNK: tl.constexpr, PDL: tl.constexpr
    ):
        row = tl.program_id(0).to(tl.int64)
        chunk = tl.program_id(1)
        offs = chunk * CHUNK + tl.arange(0, CHUNK)
        if PDL:  # the logits are the previous kernel's output
            gdc_wait()
            gdc_launch_dependents()
        x = tl.load(x_ptr + row * stride_x + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
        best = tl.max(x, 0)
        first = tl.min(tl.where(x == best, offs, 2147483647), 0)
        tl.store(val_ptr + row * CHUNKS + chunk, best)
        tl.store(idx_ptr + row * CHUNKS + chunk, first)

    @triton.jit
    def argmax_rows_kernel(
        val_ptr,
        idx_ptr,
        out_ptr,
        ids_ptr,
        past_ptr,
        live_ptr,
        host_ptr,
        host_stride,
        parity_ptr,
        CHUNKS,
        BLOCK: tl.constexpr,
        ADVANCE: tl.constexpr,
        TO_HOST: tl.constexpr,
        PDL: tl.constexpr,
    ):
        row = tl.program_id(0).to(tl.int64)
        if PDL:  # the chunks' maxima are the previous kernel's output
            gdc_wait()
        c = tl.arange(0, BLOCK)
        mask = c < CHUNKS
        vals = tl.load(val_ptr + row * CHUNKS + c, mask=mask, other=float("-inf"))
        idx = tl.load(idx_ptr + row * CHUNKS + c, mask=mask, other=2147483647)
        best = tl.max(vals, 0)
        token = tl.min(tl.where(vals == best, idx, 2147483647), 0).to(tl.int64)
        store_token(
            row, token, out_ptr, ids_ptr, past_ptr, live_ptr, host_ptr, host_stride, parity_ptr, ADVANCE, TO_HOST
        )  # fmt: skip

    @triton.jit
    def argmax_words_kernel(
        words_ptr,
        out_ptr,
        ids_ptr,
        past_ptr,
        live_ptr,
        host_ptr,
        host_stride,
        parity_ptr,
        WORDS: tl.constexpr,
        ADVANCE: tl.constexpr,
        TO_HOST: tl.constexpr,
        PDL: tl.constexpr,
    ):
        if PDL:  # the words are the lm_head GEMV's atomics
            gdc_wait()
        w = tl.arange(0, WORDS)  # [WORDS]
        best = tl.max(tl.load(words_ptr + w), 0)  # the largest logit, then the first column (`LmHeadArgmax`)
        token = 4294967295 - (best & 4294967295)
        tl.store(words_ptr + w, tl.full([WORDS], -9223372036854775807 - 1, tl.int64))  # for the next step
        store_token(
            0, token, out_ptr, ids_ptr, past_ptr, live_ptr, host_ptr, host_stride, parity_ptr, ADVANCE, TO_HOST
        )  # fmt: skip

    return (argmax_chunks_kernel, argmax_rows_kernel, argmax_words_kernel)


# The first kernel's warps a program of 4,096 logits: 4 rather than 8, on an H200 at 512 rows 20.3 against 24.2 us, at
# 224 rows 10.4 against 11.7, equal at 1 and 64 (docs/BENCHMARKS.md, session 49); the engine's `GraphKernels.argmax_warps`
ARGMAX_WARPS = 4


def argmax_triton(
    logits: torch.Tensor,
    chunk: int = 4096,
    advance: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    pdl: bool = False,
    num_warps: int = ARGMAX_WARPS,
    to_host: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """logits [B, V] (last dimension contiguous) -> int64 [B], like torch.argmax(logits, dim=-1) on finite
    values. advance: (ids, past, live), each [B] (contiguous): also ids = the tokens and past += live, as
    `ids.copy_(tokens); past.add_(live)` would. pdl: both kernels as programmatic dependent launches (where
    supported; `roseinfer.kernels.pdl`). chunk, num_warps: the first kernel's logits a program and its warps
    (ARGMAX_WARPS). to_host: (host [2, B] int64 in pinned memory, parity [B] int32 on the device, each 0 or 1):
    also host[parity, row] = the row's token, then parity = 1 - parity (`roseinfer.host_tokens`)."""
    import triton

    from roseinfer.kernels.pdl import pdl_supported

    b, v = logits.shape
    assert logits.stride(1) == 1 and v < 2**31
    chunks = triton.cdiv(v, chunk)
    vals = torch.empty(b, chunks, device=logits.device, dtype=torch.float32)
    idx = torch.empty(b, chunks, device=logits.device, dtype=torch.int32)
    out = torch.empty(b, device=logits.device, dtype=torch.int64)
    if b == 0:
        return out
    chunks_kernel, rows_kernel, _ = _get_kernels()
    pdl = pdl and pdl_supported()
    chunks_kernel[(b, chunks)](
        logits,
        logits.stride(0),
        v,
        vals,
        idx,
        chunks,
        CHUNK=chunk,
        PDL=pdl,
        num_warps=num_warps,
        launch_pdl=pdl,
    )
    ids, past, live, host, parity = _token_outputs(out, advance, to_host)
    rows_kernel[(b,)](
        vals, idx, out, ids, past, live, host, host.stride(0), parity, chunks, BLOCK=triton.next_power_of_2(chunks),
        ADVANCE=advance is not None, TO_HOST=to_host is not None, PDL=pdl, num_warps=1, launch_pdl=pdl,
    )  # fmt: skip
    return out


def _token_outputs(
    out: torch.Tensor,
    advance: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None,
    to_host: tuple[torch.Tensor, torch.Tensor] | None,
) -> tuple[torch.Tensor, ...]:
    """`store_token`'s pointers for the tokens `out` [B]: (ids, past, live, host, parity), checked; where advance or
    to_host is None, `out` stands in (not read: its flag is off)."""
    b = out.shape[0]
    ids, past, live = advance if advance is not None else (out, out, out)
    assert all(t.shape == (b,) and t.is_contiguous() for t in (ids, past, live))
    if to_host is None:
        return ids, past, live, out.view(1, b), out
    host, parity = to_host
    assert host.shape == (2, b) and host.stride(1) == 1 and host.dtype == torch.int64 and host.is_pinned()
    assert parity.shape == (b,) and parity.is_contiguous() and parity.dtype == torch.int32
    return ids, past, live, host, parity


# The words the one-row lm_head GEMV folds its logits into (`LmHeadArgmax`): column c into word c % ARGMAX_WORDS.
# On an H200 at batch 1 (docs/BENCHMARKS.md, session 61), a replay at pasts of 128 / 512 tokens: 256 words
# 1.4 / 1.8 us faster than the argmax's two kernels, 1,024 words 0.8 / 1.1 (the reader's one warp then takes 0.4
# us longer), one atomic a program into 64 words 1.0 / 0.8
ARGMAX_WORDS = 256


class LmHeadArgmax:
    """The greedy token of a one-row lm_head, folded into its GEMV (`roseinfer.kernels.norm_gemv.norm_gemv_triton(..,
    argmax=)`): `words` int64 [ARGMAX_WORDS] on the device, each the atomic max of its columns' (logit, column),
    packed so that a larger word is a larger logit and then a lower column (a NaN above every number, as
    torch.argmax ranks it); `argmax_words` reads them and sets them
    back to the smallest word, so they are ready for the next step (they start there). `folded`: the GEMV was
    launched with them since the step began (`roseinfer.linears.norm_lm_head` sets it, the step's argmax reads it)."""

    def __init__(self, device: torch.device) -> None:
        self.words = torch.full(
            (ARGMAX_WORDS,), torch.iinfo(torch.int64).min, dtype=torch.int64, device=device
        )
        self.folded = False


def argmax_words(
    words: torch.Tensor,
    advance: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    pdl: bool = False,
    to_host: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> torch.Tensor:
    """The token [1] int64 (the first column of the largest logit) that the one-row lm_head GEMV folded into
    `words` (`LmHeadArgmax`), which are then reset for the next step. advance, to_host: as `argmax_triton`'s, for
    one row. pdl: a programmatic dependent launch (after the GEMV, which is one)."""
    import triton

    from roseinfer.kernels.pdl import pdl_supported

    n = words.numel()
    assert words.dtype == torch.int64 and words.is_contiguous() and n == triton.next_power_of_2(n)
    out = torch.empty(1, device=words.device, dtype=torch.int64)
    ids, past, live, host, parity = _token_outputs(out, advance, to_host)
    pdl = pdl and pdl_supported()
    *_, words_kernel = _get_kernels()
    words_kernel[(1,)](
        words, out, ids, past, live, host, host.stride(0), parity, WORDS=n, ADVANCE=advance is not None,
        TO_HOST=to_host is not None, PDL=pdl, num_warps=1, launch_pdl=pdl,
    )  # fmt: skip
    return out
