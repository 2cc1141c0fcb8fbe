"""CUDA C++ kernels shipped as sources in the package, built at first use (issue 50's toolchain).

Nothing is built at install or import. The first call of `load(name)` on a machine with CUDA compiles
`roseinfer/cuda_ext/<name>.cu` (and any `<name>*.cuh` or `common*.cuh` beside it) with `torch.utils.cpp_extension.load` (ninja, nvcc)
into a cache folder keyed by the sources' hash, the GPU's arch and torch's version (`$ROSEINFER_CUDA_EXT_CACHE`,
default `~/.cache/roseinfer/cuda_ext/<key>`), says the build's time on stderr once, and returns the module; later
calls, in this process or the next, reuse it. One process builds a folder at a time (a lock the kernel drops when
its holder dies), from copies of the sources inside that folder, so that checkouts with the same sources share one
build instead of rebuilding it for each other (`build_lock`, `staged_sources`). Where there is no CUDA (the CPU CI), a GPU older than the kernel's
`min_arch` (the fused MLP's griddepcontrol: sm_90) or no compiler, `load` returns None and `why_not_built(name)`
says why ("not built: no CUDA"): every caller falls back to the Triton or torch path it would take otherwise.
"""

from __future__ import annotations

import contextlib
import fcntl
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
    from torch.utils.cpp_extension import load as cpp_load

    with build_lock(folder, name):
        built_before = any(folder.glob("*.so"))
        main = staged_sources(name, folder)
        t0 = time.perf_counter()
        try:
            module = cpp_load(
                name=key.replace("-", "_").replace(".", "_"),
                sources=[str(main)],
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


@contextlib.contextmanager
def build_lock(folder: Path, name: str):
    """Hold `folder`'s build lock (an flock on `folder/build.flock`) for the block: a second process waits for the
    first one's build, saying so once, rather than building beside it. The kernel drops an flock when its holder
    dies, so a build killed midway leaves nothing that blocks the next. torch's own lock (the file `lock`, which it
    creates and deletes around every load) is left behind by such a build, and torch then waits for it forever:
    it is stale whenever this lock is held, and removed."""
    with open(folder / "build.flock", "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(
                f"roseinfer.cuda_ext: waiting for another process's build of {name} ({folder})",
                file=sys.stderr,
            )
            fcntl.flock(f, fcntl.LOCK_EX)
        (folder / "lock").unlink(missing_ok=True)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def staged_sources(name: str, folder: Path) -> Path:
    """Copies of `sources(name)` in `folder/src` (rewritten where their bytes differ), and the path of the main
    one: what the build compiles. Its folder is keyed by the sources' bytes, but ninja rebuilds when a source's
    path changes, so two checkouts of the same sources that each built from their own path rebuilt each other's
    build at every first use (70 s each, on an H200's machine). Called under `build_lock`."""
    src = folder / "src"
    src.mkdir(exist_ok=True)
    for path in sources(name):
        copy = src / path.name
        data = path.read_bytes()
        if not copy.is_file() or copy.read_bytes() != data:
            tmp = copy.with_name(copy.name + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, copy)  # whole, or not at all
    return src / sources(name)[0].name


def _not_built(name: str, why: str):
    _WHY_NOT[name] = f"not built: {why}"
    return None
