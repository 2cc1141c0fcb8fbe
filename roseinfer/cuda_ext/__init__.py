"""CUDA C++ kernels shipped as sources in the package, built at first use (issue 50's toolchain).

Nothing is built at install or import. The first call of `load(name)` on a machine with CUDA compiles
`roseinfer/cuda_ext/<name>.cu` (and any `<name>*.cuh` or `common*.cuh` beside it) with `torch.utils.cpp_extension.load` (ninja, nvcc)
into a cache folder keyed by the sources' hash, the GPU's arch and torch's version (`$ROSEINFER_CUDA_EXT_CACHE`,
default `~/.cache/roseinfer/cuda_ext/<key>`), says the build's time on stderr once, and returns the module; later
calls, in this process or the next, reuse it. Where there is no CUDA (the CPU CI), a GPU older than the kernel's
`min_arch` (the fused MLP's griddepcontrol: sm_90) or no compiler, `load` returns None and `why_not_built(name)`
says why ("not built: no CUDA"): every caller falls back to the Triton or torch path it would take otherwise.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import sys
import time
from pathlib import Path

from roseinfer import names

SOURCES = Path(__file__).parent
CACHE_ENV = names.ROSEINFER_CUDA_EXT_CACHE
_WHY_NOT: dict[str, str] = {}


def layer_norm_fits(ln, width: int) -> bool:
    """Whether a LayerNorm's weight and bias can be a one-row kernel's: float16 [width], contiguous and 16-byte
    aligned (the kernels copy them into shared memory 16 bytes at a time with cp.async, which faults otherwise)."""
    import torch

    return all(
        p is not None
        and p.dtype == torch.float16
        and tuple(p.shape) == (width,)
        and p.is_contiguous()
        and p.data_ptr() % 16 == 0
        for p in (ln.weight, ln.bias)
    )


def sources(name: str) -> list[Path]:
    """The module's sources: `<name>.cu`, the headers it may include (`<name>*.cuh`) and the ones every kernel may
    (`common*.cuh`), sorted."""
    main = SOURCES / f"{name}.cu"
    if not main.is_file():
        raise FileNotFoundError(f"no CUDA source {main}")
    return [main, *sorted(SOURCES.glob(f"{name}*.cuh")), *sorted(SOURCES.glob("common*.cuh"))]


def cache_key(name: str, arch: str, torch_version: str, extra_flags: tuple[str, ...] = ()) -> str:
    """`<name>-<arch>-torch<version>-<hash>`: the hash covers every source's bytes and the build flags, so an
    edited kernel, another GPU or another torch never reuses a stale build."""
    h = hashlib.sha256()
    for path in sources(name):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    h.update(" ".join(extra_flags).encode())
    safe_torch = torch_version.replace("+", "_").replace("/", "_")
    return f"{name}-{arch}-torch{safe_torch}-{h.hexdigest()[:16]}"


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "roseinfer" / "cuda_ext")


def why_not_built(name: str) -> str | None:
    """None once `load(name)` built (or found) the module; otherwise the one line that says why not."""
    return _WHY_NOT.get(name)


def available(name: str) -> bool:
    return load(name) is not None


def build_flags(arch: str, defines: tuple[str, ...] = ()) -> tuple[str, ...]:
    """nvcc's flags of a build for `arch` (sm_90a, say) beside those torch's extension build adds itself
    (`torch.utils.cpp_extension.COMMON_NVCC_FLAGS`: no implicit half conversions, among others)."""
    return ("-O3", "--use_fast_math", "-lineinfo", f"-gencode=arch=compute_{arch[3:]},code={arch}",
            *(f"-D{d}" for d in defines))  # fmt: skip


@functools.cache
def load(name: str, defines: tuple[str, ...] = (), min_arch: tuple[int, int] = (0, 0)):
    """The built module, or None (then `why_not_built(name)` says why). defines: extra `-D` macros (a test
    build's planted delay, say), part of the cache key. min_arch: the oldest GPU (compute capability) its code
    assembles for; on an older one nothing is built (nvcc would fail on every process's first call)."""
    import torch

    if not torch.cuda.is_available():
        return _not_built(name, "no CUDA")
    if tuple(torch.cuda.get_device_capability()) < tuple(min_arch):
        have = "".join(map(str, torch.cuda.get_device_capability()))
        return _not_built(name, f"needs sm_{min_arch[0]}{min_arch[1]}, this GPU is sm_{have}")
    if (
        shutil.which("nvcc") is None
        and not (Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin/nvcc").exists()
    ):
        return _not_built(name, "no nvcc")
    major, minor = torch.cuda.get_device_capability()
    arch = (
        f"sm_{major}{minor}{'a' if major >= 9 else ''}"  # sm_90a: Hopper's own instructions (setmaxnreg, ...)
    )
    flags = build_flags(arch, defines)
    key = cache_key(name, arch, torch.__version__, flags)
    folder = cache_root() / key
    folder.mkdir(parents=True, exist_ok=True)
    built_before = any(folder.glob("*.so"))
    from torch.utils.cpp_extension import load as cpp_load

    t0 = time.perf_counter()
    try:
        module = cpp_load(
            name=key.replace("-", "_").replace(".", "_"),
            sources=[str(sources(name)[0])],
            extra_cuda_cflags=list(flags),
            extra_cflags=["-O3"],
            build_directory=str(folder),
            verbose=False,
        )
    except Exception as e:  # a compiler error: say it once, fall back
        line = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
        return _not_built(name, f"build failed: {line}")
    if not built_before:
        print(f"roseinfer.cuda_ext: built {name} for {arch} in {time.perf_counter() - t0:.1f} s ({folder})",
              file=sys.stderr)  # fmt: skip
    _WHY_NOT.pop(name, None)
    return module


def _not_built(name: str, why: str):
    _WHY_NOT[name] = f"not built: {why}"
    return None
