"""The decode step's linears from 33 rows as a CUTLASS Hopper GEMM that loads its weights before its PDL wait
(`cutlass_gemm.cu`, built at first use).

At these rows cuBLAS's GEMMs are launched plainly, so each starts after the kernel in front has finished and only
then fetches its weights: at 64 rows GPT-2 small's c_attn took 4.9 us for 3.5 MB (0.85 us at the copy bandwidth).
This kernel (CUTLASS example 63's "GEMM with weight prefetch", fp16) is a programmatic dependent launch whose
weights' producer warp fills its shared-memory stages while the kernel in front still runs; only the activations'
loads wait. In a chain of GPT-2 small's four linears on an H200 a layer took 15.1 us against cuBLAS's 23.6
(`scripts/probe_cutlass_gemm.py`, docs/BENCHMARKS.md, session 44).

The headers come from the `nvidia-cutlass` wheel at CUTLASS_VERSION (its `cutlass_library/source`: include/,
tools/util/include/ and the example's folder). Where that wheel is missing, at another version, or where
`roseinfer.cuda_ext.load` builds nothing (no CUDA, a GPU other than Hopper, no nvcc), `module()` is None,
`roseinfer.cuda_ext.why_not_built(NAME)` says why, and the linears stay on cuBLAS. Only the headers are needed:
`pip install --no-deps nvidia-cutlass==4.2.0.0` (the wheel's own dependencies are its Python code generator's).

Where the engine runs it: buckets of more than 32 and at most `GraphKernels.cutlass_gemm_max_batch` rows, less
`GraphKernels.cutlass_cublas_rows` (`roseinfer.linears.small_batch_gemv(cutlass_rows=)`; the kernel itself takes up
to MAX_ROWS), float16 linears with a bias whose operands TMA can address (`fits`); those buckets launch their Triton
kernels as programmatic dependents too, so the add + LayerNorm in front of c_attn and c_fc releases them early (for
models up to 768 wide before its own wait: `GraphKernels.layer_norm_early`), and the attention
(`GraphKernels.cutlass_pdl_attention`) starts while c_attn finishes and releases attn_proj right after its wait. The
GEMM itself releases the kernel after it once half of its weights' K tiles are issued, without waiting for the
kernel in front (`roseinfer.kernels.pdl`: an early releaser; the shallow form below holds only 4 of a 768-deep K's
12 tiles before its wait, and releases after it).

Its shallow form (`shallow=True`) runs the same kernel on SHALLOW_STAGES pipeline stages rather than as many as
shared memory holds (13 at K = 768: one block an SM). At 512 rows c_attn's and c_fc's 64-row tiles are 288 and
384 blocks, three waves of the deep form and one of this; and beside the paged attention (two halves of a
batch on two streams) an SM holds the GEMM's blocks and the attention's together. The engine takes it in step
parts of 256 rows and more (`GraphKernels.cutlass_shallow_from`; docs/BENCHMARKS.md, session 54).

Its K-split form (`cutlass_gemm_parts`) is the same mainloop over S slices of K as one batched launch (the batch
index picks the slice), each writing its float32 product without the bias. At 64 rows and N = 768, attn_proj and
mlp_proj have 12 blocks, each down the whole K (3,072 for mlp_proj: 6.1 us a launch where its weights need 1); their
reader, the residual add + LayerNorm, adds the parts (`roseinfer.linears.linear_to_residual`,
`roseinfer.kernels.split_sum.SplitK`). GPT-2 small's step at 64 rows and a past of 256 on an H200: 490.7 -> 457.0 us
with parts of about 768 (mlp_proj 4, attn_proj whole); parts of 384 (8 and 2) were slower than no split there, 515
us, and at a past of 512 (docs/BENCHMARKS.md, session 45). attn_proj alone in 3 parts as well (`split_count`'s
at_least, `GraphKernels.cutlass_min_splits`, up to 64 rows): 401.8 -> 395.6 us (session 50).
"""

from __future__ import annotations

import functools
import importlib.metadata
import sys
from pathlib import Path

from roseinfer import cuda_ext

NAME = "cutlass_gemm"
CUTLASS_VERSION = "4.2.0.0"  # the nvidia-cutlass wheel whose headers it is built from
INSTALL = f"pip install --no-deps nvidia-cutlass=={CUTLASS_VERSION}"  # the headers alone, not its code generator's deps
# The rows it takes: a 64-token tile along them, as many tiles as the rows need, up to the largest bucket it was
# measured at (`cutlass_gemm.cu`'s MAX_ROWS; where the engine runs it is `GraphKernels.cutlass_gemm_max_batch`)
MAX_ROWS = 512
K_TILE = 64  # the mainloop's K tile: a split part is whole tiles
# The shallow form's pipeline stages (`cutlass_gemm.cu`'s SHALLOW_STAGES): 64 KB of tiles, so that several blocks
# share an SM, where the deep form fills its shared memory
SHALLOW_STAGES = 4
# Hopper only: the example's kernel has a body only where `__CUDA_ARCH_FEAT_SM90_ALL` is defined (sm_90a); built
# for a later GPU it would be an empty stub that returns success (the .cu refuses to build there).
ARCH_MAJOR = 9
EXAMPLE = "examples/63_hopper_gemm_with_weight_prefetch"


def cutlass_source() -> tuple[Path | None, str]:
    """(the wheel's `cutlass_library/source`, "") or (None, why not). From the installed distribution's files,
    without importing its code generator."""
    try:
        dist = importlib.metadata.distribution("nvidia-cutlass")
    except importlib.metadata.PackageNotFoundError:
        return None, f"no CUTLASS headers ({INSTALL})"
    if dist.version != CUTLASS_VERSION:
        return None, f"needs nvidia-cutlass=={CUTLASS_VERSION}, found {dist.version} ({INSTALL})"
    source = Path(str(dist.locate_file("cutlass_library/source")))
    if not (source / EXAMPLE).is_dir():
        return None, f"{source / EXAMPLE}: missing from the nvidia-cutlass wheel"
    return source, ""


def build_flags(source: Path) -> tuple[str, ...]:
    """nvcc's flags of this module's build beside `roseinfer.cuda_ext.build_flags` (all in its cache key)."""
    return (
        "-std=c++17",  # CUTLASS 4.2's headers are C++17
        "-DCUTLASS_ENABLE_GDC_FOR_SM90",  # griddepcontrol in CUTLASS's kernels
        "-DNDEBUG",  # CUTLASS's device asserts off: with them ptxas serialised the wgmma pipeline (warning C7510)
        f"-DROSEINFER_CUTLASS_{CUTLASS_VERSION.replace('.', '_')}",  # the headers' version, in the cache key
        "-U__CUDA_NO_HALF_OPERATORS__",  # torch's extension build defines these; CUTLASS's headers use them
        "-U__CUDA_NO_HALF_CONVERSIONS__",
        "-U__CUDA_NO_HALF2_OPERATORS__",
        f"-I{source / 'include'}",
        f"-I{source / 'tools/util/include'}",
        f"-I{source / EXAMPLE}",
    )


@functools.cache
def module():
    """The built module, or None (then `roseinfer.cuda_ext.why_not_built(NAME)` says why)."""
    import torch

    if not torch.cuda.is_available():  # before the headers: on the CPU CI the reason is "no CUDA"
        return cuda_ext.load(NAME)
    major, minor = torch.cuda.get_device_capability()
    if major != ARCH_MAJOR:  # before the headers too: on another GPU the wheel would not help
        return cuda_ext._not_built(NAME, f"needs a Hopper GPU (sm_90), this GPU is sm_{major}{minor}")
    source, why = cutlass_source()
    if source is None:
        return cuda_ext._not_built(NAME, why)
    return cuda_ext.load(NAME, extra=build_flags(source))


@functools.cache
def say_not_built() -> None:
    """One stderr line a process: the GEMM is off and why (the linears of its buckets run on cuBLAS)."""
    print(
        f"roseinfer: the CUTLASS GEMM's buckets (33 rows and more) on cuBLAS, it is {cuda_ext.why_not_built(NAME)}",
        file=sys.stderr,
    )


def shapes_fit(x, weight, bias) -> bool:
    """What the kernel needs of its operands (no GPU asked): float16 x [T, K] of 1 to MAX_ROWS rows, weight [N, K]
    and a bias [N], contiguous but x's rows, on one device, as TMA addresses them (16-byte aligned rows: x's row
    stride, K and N multiples of 8; x's rows at least K apart)."""
    import torch

    if bias is None or x.dim() != 2 or weight.dim() != 2 or bias.dim() != 1:
        return False
    if not all(t.dtype == torch.float16 and t.device == x.device for t in (weight, bias)):
        return False
    n, k = weight.shape
    return (
        x.dtype == torch.float16
        and 0 < x.shape[0] <= MAX_ROWS
        and x.shape[1] == k
        and bias.shape[0] == n
        and n > 0
        and k > 0
        and x.stride(1) == 1
        and x.stride(0) >= k
        and x.stride(0) % 8 == 0
        and k % 8 == 0
        and n % 8 == 0
        and weight.is_contiguous()
        and bias.is_contiguous()
        and all(t.data_ptr() % 16 == 0 for t in (x, weight, bias))
    )


def split_count(k: int, k_per_split: int, at_least: int = 1) -> int:
    """How many parts a K-deep product splits into for about `k_per_split` of K each (`cutlass_gemm_parts`): K
    / k_per_split rounded (at least `at_least`), less until each part is whole 64-deep tiles; 1 (no split) where
    k_per_split is 0."""
    if k_per_split <= 0:
        return 1
    splits = max(1, at_least, round(k / k_per_split))
    while splits > 1 and k % (K_TILE * splits):
        splits -= 1
    return splits


def fits(x, weight, bias) -> bool:
    """Whether y = x @ weight^T + bias can run here: `shapes_fit`, on a GPU where the module is built."""
    return x.is_cuda and shapes_fit(x, weight, bias) and module() is not None


def cutlass_gemm(x, weight, bias, gelu: bool = False, shallow: bool = False):
    """act(x [T, K] @ weight [N, K]^T + bias [N]) -> [T, N]; act is GPT-2's tanh GELU when `gelu`. Callers check
    `fits`. A programmatic dependent launch inside the step's PDL scope (`roseinfer.kernels.pdl`). shallow: on
    SHALLOW_STAGES pipeline stages rather than as many as shared memory holds (several blocks an SM)."""
    from roseinfer.kernels.pdl import pdl_enabled

    return module().gemm(x, weight, bias, gelu, pdl_enabled(), shallow)


def cutlass_gemm_parts(x, weight, splits: int, shallow: bool = False):
    """x [T, K] @ weight [N, K]^T as float32 parts [splits, T, N] whose sum is the product, each over a K / splits
    slice of K (no bias: the reader adds it, `roseinfer.kernels.split_sum.SplitK`). One launch of splits times the
    blocks: mlp_proj at 64 rows otherwise runs 12 blocks down a K of 3,072. Callers check `fits` and that K is a
    multiple of 64 * splits (`split_count`). shallow: as `cutlass_gemm`'s."""
    from roseinfer.kernels.pdl import pdl_enabled

    return module().gemm_parts(x, weight, splits, pdl_enabled(), shallow)
