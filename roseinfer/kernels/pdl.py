"""Programmatic dependent launch (PDL, Hopper and later) for the decode step's Triton kernels.

In a captured decode step at batch 1 every kernel is short (2 to 6 us) and about 2.5 us of each is fixed cost:
the launch, the first loads' DRAM latency, the tail (scripts/bench_gemv.py: time = ~2.5 us + bytes at ~2.4 TB/s).
With PDL a kernel is launched (`launch_pdl=True`, Triton's cuLaunchKernelEx attribute; a captured graph keeps it
as a programmatic edge) as soon as every program of the kernel before it has called `gdc_launch_dependents`.
Its programs then do what does not depend on that kernel (the GEMV issues all of its weight loads) and block
in `gdc_wait` until the kernel before has finished and its writes are visible.

The protocol every PDL kernel here follows, so that the chain stays correct:
- it calls `gdc_wait` before its first read of anything an earlier kernel of the step wrote, and before its
  first write (the wait is for the whole previous grid, which itself waited for the one before it: completion is
  transitive, so after the wait every earlier kernel of the step has finished);
- it calls `gdc_launch_dependents` right after its wait, so at most two kernels are in flight: the running one
  and the next, which prefetches its weights and waits. Early releasers call it sooner: with `pdl_early_release`
  a one-row GEMV calls it as it starts; with `pdl_layer_norm_early` the residual add + LayerNorm kernel does (in
  the CUTLASS GEMM's buckets of models up to 768 wide: `GraphKernels.layer_norm_early_in`); and the CUTLASS GEMM
  of buckets 48 to 512 (less `GraphKernels.cutlass_cublas_rows`; `roseinfer.cuda_ext.cutlass_gemm`, CUDA C++
  with its own griddepcontrol) once half of its weights' K tiles are issued, from the warp that loads them
  without waiting for the kernel in front (its shallow form, in step parts of 256 rows and more, gets there only
  after its wait: its stages hold a third of a 768-deep K). The next kernel then loads its weights while this
  one still loads its own, and if that one releases early too, the one after it, so several kernels are in
  flight (at most what fits on the SMs beside the running one: a grid is released only once every one of its
  programs has started, so the running kernel never waits for room). With the add + LayerNorm among them, the
  chain reaches across a layer in the deep GEMM's buckets (mlp_proj's parts, the add + LayerNorm, c_attn, then
  the next layer's attention, which releases only after its wait; what it reads before, below, is its own
  layer's). Before a plain launch (ln_f's, in front of cuBLAS's lm_head) an early release changes nothing.
A kernel launched without the attribute (cuBLAS, torch's) is ordered as usual, and a PDL kernel after it starts
once it completes.

What a kernel may read before its wait: what no kernel of the step writes (weights, LayerNorm parameters, and
what the step's inputs held before its first kernel). With early release the kernels before it may all still
be running, so nothing written inside the step is safe before the wait. The split attention's prefetch
(`pdl_attention_prefetch`) and the CUDA paged attention (`roseinfer.cuda_ext.paged_attn`, which reads the past
lengths, its table row and its first K/V tiles before it waits) rely on three facts of the captured step
(`roseinfer.cuda_graphs`): its past lengths and block tables are staged before the graph runs, and the graph
writes the lengths only in its last kernel (the argmax's, for the next replay); the past K/V (positions below
each sequence's length) was written by earlier replays; and within a step a layer's cache is written only at the
new token's slot (position `past`), which no slice and no tile copy reads. An in-graph write to any of these
before the attention would need the prefetch moved after the wait.

`pdl_scope(enabled)` turns it on for the kernels launched inside it (the captured decode step opens it;
`roseinfer.cuda_graphs`); `pdl_enabled()` is what each launcher asks.
"""

from __future__ import annotations

import contextlib
import contextvars

_PDL: contextvars.ContextVar[bool] = contextvars.ContextVar("roseinfer_pdl", default=False)
_PDL_ATTENTION: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "roseinfer_pdl_attention", default=False
)
_PDL_RELEASE: contextvars.ContextVar[bool] = contextvars.ContextVar("roseinfer_pdl_release", default=False)
_PDL_PREFETCH: contextvars.ContextVar[bool] = contextvars.ContextVar("roseinfer_pdl_prefetch", default=False)
_PDL_EARLY: contextvars.ContextVar[bool] = contextvars.ContextVar("roseinfer_pdl_early", default=False)
_PDL_LN_EARLY: contextvars.ContextVar[bool] = contextvars.ContextVar("roseinfer_pdl_ln_early", default=False)
_SUPPORTED: bool | None = None


def pdl_supported() -> bool:
    """Triton's PDL intrinsics exist and the device is Hopper or later (griddepcontrol is sm_90+)."""
    global _SUPPORTED
    if _SUPPORTED is None:
        try:
            import torch
            from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait  # noqa: F401

            _SUPPORTED = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] >= 9
        except ImportError:
            _SUPPORTED = False
    return _SUPPORTED


def pdl_enabled(attention: bool = False) -> bool:
    """Whether the launcher asking should use PDL; the paged-attention kernel asks with attention=True."""
    return _PDL_ATTENTION.get() if attention else _PDL.get()


def pdl_attention_release() -> bool:
    """Whether the attention kernel (split or one-pass), launched plainly, still releases the kernel after it early
    (calls `gdc_launch_dependents`, so attn_proj's weight loads overlap the attention; its `gdc_wait` returns at
    once in a kernel that was not launched as a dependent)."""
    return _PDL_RELEASE.get()


def pdl_attention_prefetch() -> bool:
    """Whether the split attention kernel, where each slice is one block, is launched as a dependent and loads its
    block before it waits (`roseinfer.kernels.split_attention`)."""
    return _PDL_PREFETCH.get()


def pdl_early_release() -> bool:
    """Whether a one-row GEMV releases the kernel after it as it starts, before its own weight loads and wait (so
    the next kernel's weights load while this one still waits), rather than right after its wait."""
    return _PDL_EARLY.get()


def pdl_layer_norm_early() -> bool:
    """Whether the residual add + LayerNorm kernel (`roseinfer.kernels.add_layernorm`) releases the kernel after it
    as it starts, before its wait, rather than right after it (and runs one warp a row)."""
    return _PDL_LN_EARLY.get()


@contextlib.contextmanager
def pdl_scope(
    enabled: bool,
    attention: bool = False,
    attention_release: bool = False,
    attention_prefetch: bool = False,
    early_release: bool = False,
    layer_norm_early: bool = False,
):
    """Kernels launched inside use PDL when `enabled` and the device supports it; the attention kernels only
    with `attention` too. At batch 1 on the H100 PDL on the one-pass attention kernel made a step faster at 128
    past tokens and slower at 512, and on the split kernel slower at every past (docs/BENCHMARKS.md, issue 27): a
    dependent that only waits gains nothing, and its programs, launched while the GEMV before still holds every
    SM, run slower. attention_release: see `pdl_attention_release`; attention_prefetch: see
    `pdl_attention_prefetch` (a dependent that loads its past while it waits: faster); layer_norm_early: see
    `pdl_layer_norm_early`."""
    on = bool(enabled) and pdl_supported()
    tokens = (
        _PDL.set(on),
        _PDL_ATTENTION.set(on and attention),
        _PDL_RELEASE.set(on and attention_release),
        _PDL_PREFETCH.set(on and attention_prefetch),
        _PDL_EARLY.set(on and early_release),
        _PDL_LN_EARLY.set(on and layer_norm_early),
    )
    try:
        yield
    finally:
        _PDL_LN_EARLY.reset(tokens[5])
        _PDL_EARLY.reset(tokens[4])
        _PDL_PREFETCH.reset(tokens[3])
        _PDL_RELEASE.reset(tokens[2])
        _PDL_ATTENTION.reset(tokens[1])
        _PDL.reset(tokens[0])


def gdc_functions():
    """(gdc_wait, gdc_launch_dependents) for use inside @triton.jit kernels, behind a constexpr PDL flag. Where
    PDL is not supported they are empty stand-ins, never traced (the flag is False there)."""
    import triton

    if pdl_supported():
        from triton.language.extra.cuda import gdc_launch_dependents, gdc_wait

        return gdc_wait, gdc_launch_dependents

    @triton.jit
    def gdc_wait():
        pass

    @triton.jit
    def gdc_launch_dependents():
        pass

    return gdc_wait, gdc_launch_dependents
