"""The decode step's linears at 33 to 64 rows as a CUTLASS Hopper GEMM that loads its weights before its PDL wait
(`cutlass_gemm.cu`, built at first use).

At these rows cuBLAS's GEMMs are launched plainly, so each starts after the kernel in front has finished and only
then fetches its weights: at 64 rows GPT-2 small's c_attn took 4.9 us for 3.5 MB (0.85 us at the copy bandwidth).
This kernel (CUTLASS example 63's "GEMM with weight prefetch", fp16) is a programmatic dependent launch whose
weights' producer warp fills its shared-memory stages while the kernel in front still runs; only the activations'
loads wait. In a chain of GPT-2 small's four linears on an H200 a layer took 15.1 us against cuBLAS's 23.6
(`scripts/probe_cutlass_gemm.py`, docs/BENCHMARKS.md, session 44).

The headers come from the `nvidia-cutlass` wheel at CUTLASS_VERSION (its `cutlass_library/source`: include/,
tools/util/include/ and the example's folder). Where that wheel is missing, at another version, or where
`roseinfer.cuda_ext.load` builds nothing (no CUDA, a GPU before sm_90, no nvcc), `module()` is None,
`roseinfer.cuda_ext.why_not_built(NAME)` says why, and the linears stay on cuBLAS.

Where the engine runs it: buckets of more than 32 and at most `GraphKernels.cutlass_gemm_max_batch` rows
(`roseinfer.linears.small_batch_gemv(cutlass_rows=)`), float16 linears with a bias whose operands TMA can address
(`fits`); those buckets launch their Triton kernels as programmatic dependents too, so the add + LayerNorm in
front of c_attn and c_fc releases them early, and the attention (`GraphKernels.cutlass_pdl_attention`) starts
while c_attn finishes and releases attn_proj as it starts.
"""

from __future__ import annotations

import functools
import importlib.metadata
import sys
from pathlib import Path

from roseinfer import cuda_ext

NAME = "cutlass_gemm"
KERNEL = "cutlass"  # the profilers' kernel names of its launches contain it (cutlass::device_kernel<...>)
CUTLASS_VERSION = "4.2.0.0"  # the nvidia-cutlass wheel whose headers it is built from
MAX_ROWS = 64  # one 64-token tile along the rows
MIN_ARCH = (9, 0)  # TMA, wgmma and griddepcontrol
EXAMPLE = "examples/63_hopper_gemm_with_weight_prefetch"


def cutlass_source() -> tuple[Path | None, str]:
    """(the wheel's `cutlass_library/source`, "") or (None, why not)."""
    try:
        version = importlib.metadata.version("nvidia-cutlass")
    except importlib.metadata.PackageNotFoundError:
        return None, f"no CUTLASS headers (pip install nvidia-cutlass=={CUTLASS_VERSION})"
    if version != CUTLASS_VERSION:
        return None, f"needs nvidia-cutlass=={CUTLASS_VERSION}, found {version}"
    import cutlass_library

    source = Path(cutlass_library.__file__).parent / "source"
    if not (source / EXAMPLE).is_dir():
        return None, f"{source / EXAMPLE}: missing from the nvidia-cutlass wheel"
    return source, ""


@functools.cache
def module():
    """The built module, or None (then `roseinfer.cuda_ext.why_not_built(NAME)` says why)."""
    import torch

    if not torch.cuda.is_available():  # before the headers: on the CPU CI the reason is "no CUDA"
        return cuda_ext.load(NAME, min_arch=MIN_ARCH)
    source, why = cutlass_source()
    if source is None:
        return cuda_ext._not_built(NAME, why)
    flags = (
        "-std=c++17",
        "--expt-relaxed-constexpr",
        "-DCUTLASS_ENABLE_GDC_FOR_SM90",  # griddepcontrol in CUTLASS's kernels
        "-DNDEBUG",  # CUTLASS's device asserts off: with them the wgmma pipeline is serialised (ptxas C7510)
        f"-DROSEINFER_CUTLASS_{CUTLASS_VERSION.replace('.', '_')}",  # the headers' version, in the cache key
        "-U__CUDA_NO_HALF_OPERATORS__",  # torch's extension build defines these; CUTLASS's headers use them
        "-U__CUDA_NO_HALF_CONVERSIONS__",
        "-U__CUDA_NO_HALF2_OPERATORS__",
        f"-I{source / 'include'}",
        f"-I{source / 'tools/util/include'}",
        f"-I{source / EXAMPLE}",
    )
    return cuda_ext.load(NAME, min_arch=MIN_ARCH, extra=flags)


@functools.cache
def say_not_built() -> None:
    """One stderr line a process: the GEMM is off and why (the linears at 33 to 64 rows run on cuBLAS)."""
    print(
        f"roseinfer: linears at 33 to 64 rows on cuBLAS, the CUTLASS GEMM is {cuda_ext.why_not_built(NAME)}",
        file=sys.stderr,
    )


def fits(x, weight, bias) -> bool:
    """Whether y = x @ weight^T + bias can run here: float16 on a GPU where the module is built, at most MAX_ROWS
    rows, a bias, and what TMA needs (16-byte aligned rows: x's row stride, K and N multiples of 8)."""
    import torch

    if not (x.is_cuda and x.dtype == torch.float16 and weight.dtype == torch.float16 and bias is not None):
        return False
    if not (
        0 < x.shape[0] <= MAX_ROWS and x.stride(1) == 1 and weight.is_contiguous() and bias.is_contiguous()
    ):
        return False
    n, k = weight.shape
    aligned = all(t.data_ptr() % 16 == 0 for t in (x, weight, bias))
    return aligned and x.stride(0) % 8 == 0 and k % 8 == 0 and n % 8 == 0 and module() is not None


def cutlass_gemm(x, weight, bias, gelu: bool = False):
    """act(x [T, K] @ weight [N, K]^T + bias [N]) -> [T, N]; act is GPT-2's tanh GELU when `gelu`. Callers check
    `fits`. A programmatic dependent launch inside the step's PDL scope (`roseinfer.kernels.pdl`)."""
    from roseinfer.kernels.pdl import pdl_enabled

    return module().gemm(x, weight, bias, gelu, pdl_enabled())
