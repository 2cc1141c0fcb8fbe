"""CUDA C++ kernels shipped as sources in the package, built at first use (issue 50's toolchain).

Nothing is built at install or import. The first call of `load(name)` on a machine with CUDA compiles
`roseinfer/cuda_ext/<name>.cu` (and any `<name>*.cuh` or `common*.cuh` beside it) with `torch.utils.cpp_extension.load` (ninja, nvcc)
into a cache folder keyed by the sources' hash, the GPU's arch, torch's version and the toolchain the build's
command lines name (`$ROSEINFER_CUDA_EXT_CACHE`, default `~/.cache/roseinfer/cuda_ext/<key>`), says on stderr that it
builds and then how long that took, and returns the module; later calls, in this process or the next, reuse it. One
process builds a folder at a time (a lock the kernel drops when its holder dies), from copies of the sources inside
that folder, so that checkouts of the same sources with the same torch share one build instead of rebuilding it
for each other (`build_lock`, `staged_sources`). Where there is no CUDA (the CPU CI), a GPU older than the kernel's
`min_arch` (the fused MLP's griddepcontrol: sm_90) or no compiler, `load` returns None and `why_not_built(name)`
says why ("not built: no CUDA"): every caller falls back to the Triton or torch path it would take otherwise.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sys
import time
from pathlib import Path

from roseinfer import names

SOURCES = Path(__file__).parent
CACHE_ENV = names.ROSEINFER_CUDA_EXT_CACHE
_WHY_NOT: dict[str, str] = {}
# How a folder is built, in every cache key: code that builds another way (before build.flock and the staged
# sources) never shares a folder with this code, whose lock it would not take.
BUILD_LAYOUT = "staged sources, build.flock"
# A load that waits longer than this for another's build says so (a warm cache's load holds the lock for less).
WAIT_NOTICE_S = 2.0


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


def ln_fold(ln, lin):
    """The LayerNorm `ln` folded into the linear `lin` after it, as the one-row kernels run them (common.cuh's
    residual_stats and dot_rows_w): (fold_w, fold_b), float32 [N], with fold_w[r] = sum_k ln.weight[k] W[r, k] and
    fold_b[r] = sum_k ln.bias[k] W[r, k] + lin.bias[r], so that LayerNorm(s) W^T + b = rstd ((s * ln.weight) W^T -
    mean fold_w) + fold_b. Made once per set of weights and kept on `lin` (made again where a weight's storage or
    version changed: an in-place load); the first call is the step's warm-up, before any capture."""
    import torch

    def version(t):
        try:
            return t._version
        except RuntimeError:  # an inference tensor keeps no version: its storage alone says it changed
            return None

    params = (ln.weight, ln.bias, lin.weight, lin.bias)
    key = tuple((p.data_ptr(), version(p)) for p in params)
    kept = getattr(lin, "_roseinfer_ln_fold", None)
    if kept is not None and kept[0] == key:
        return kept[1]
    with torch.no_grad():
        w = lin.weight.float()  # [N, K]
        folded = ((w * ln.weight.float()).sum(1), w @ ln.bias.float() + lin.bias.float())  # [N] each
    lin._roseinfer_ln_fold = (key, folded)
    return folded


def sources(name: str) -> list[Path]:
    """The module's sources: `<name>.cu`, the headers it may include (`<name>*.cuh`) and the ones every kernel may
    (`common*.cuh`), sorted."""
    main = SOURCES / f"{name}.cu"
    if not main.is_file():
        raise FileNotFoundError(f"no CUDA source {main}")
    return [main, *sorted(SOURCES.glob(f"{name}*.cuh")), *sorted(SOURCES.glob("common*.cuh"))]


def cache_key(
    name: str,
    arch: str,
    torch_version: str,
    extra_flags: tuple[str, ...] = (),
    toolchain: tuple[str, ...] = (),
) -> str:
    """`<name>-<arch>-torch<version>-<hash>`: the hash covers every source's bytes, the build flags, the build's
    layout and `toolchain` (what else the build's command lines name: the interpreter's ABI tag, torch's folder,
    nvcc), so an edited kernel, another GPU, another torch or another interpreter never reuses a stale build, and
    two installs with another torch, interpreter or nvcc (which the command lines name: ninja rebuilds when one
    changes) do not rebuild each other's. $CXX and Python's include folder are on those lines too, not here."""
    h = hashlib.sha256()
    for path in sources(name):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    h.update(" ".join(extra_flags).encode())
    h.update(BUILD_LAYOUT.encode())
    h.update("\0".join(toolchain).encode())
    safe_torch = torch_version.replace("+", "_").replace("/", "_")
    return f"{name}-{arch}-torch{safe_torch}-{h.hexdigest()[:16]}"


def cache_root() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "roseinfer" / "cuda_ext")


def why_not_built(name: str) -> str | None:
    """None once `load(name)` built (or found) the module; otherwise the one line that says why not."""
    return _WHY_NOT.get(name)


def available(name: str) -> bool:
    return load(name) is not None


def build_flags(arch: str, defines: tuple[str, ...] = (), extra: tuple[str, ...] = ()) -> tuple[str, ...]:
    """nvcc's flags of a build for `arch` (sm_90a, say) beside those torch's extension build adds itself
    (`torch.utils.cpp_extension.COMMON_NVCC_FLAGS`: no implicit half conversions, among others); extra: a
    module's own (CUTLASS's include folders, say), part of the cache key like the rest."""
    return ("-O3", "--use_fast_math", "-lineinfo", f"-gencode=arch=compute_{arch[3:]},code={arch}",
            *(f"-D{d}" for d in defines), *extra)  # fmt: skip


def nvcc_command() -> str | None:
    """The nvcc torch's build runs: `$PYTORCH_NVCC`, else CUDA_HOME's (torch's: `$CUDA_HOME`, `$CUDA_PATH`, the
    nvcc on PATH or /usr/local/cuda); None where there is none."""
    from torch.utils import cpp_extension

    if os.environ.get("PYTORCH_NVCC"):
        return os.environ["PYTORCH_NVCC"]
    home = cpp_extension.CUDA_HOME
    nvcc = Path(home) / "bin" / "nvcc" if home else None
    return str(nvcc) if nvcc is not None and nvcc.exists() else None


def build_folder(name: str, arch: str, flags: tuple[str, ...], nvcc: str) -> Path:
    """The cache folder of `name` built for `arch` with `flags` by `nvcc` (its key's toolchain: the interpreter's
    ABI tag, torch's folder, nvcc)."""
    import torch

    toolchain = (sys.implementation.cache_tag or "", str(Path(torch.__file__).parent), nvcc)
    return cache_root() / cache_key(name, arch, torch.__version__, flags, toolchain)


@functools.cache
def load(
    name: str, defines: tuple[str, ...] = (), min_arch: tuple[int, int] = (0, 0), extra: tuple[str, ...] = ()
):
    """The built module, or None (then `why_not_built(name)` says why). defines: extra `-D` macros (a test
    build's planted delay, say), part of the cache key. min_arch: the oldest GPU (compute capability) its code
    assembles for; on an older one nothing is built (nvcc would fail on every process's first call). extra: more
    nvcc flags (`build_flags`)."""
    import torch

    if not torch.cuda.is_available():
        return _not_built(name, "no CUDA")
    if tuple(torch.cuda.get_device_capability()) < tuple(min_arch):
        have = "".join(map(str, torch.cuda.get_device_capability()))
        return _not_built(name, f"needs sm_{min_arch[0]}{min_arch[1]}, this GPU is sm_{have}")
    nvcc = nvcc_command()
    if nvcc is None:
        return _not_built(name, "no nvcc")
    major, minor = torch.cuda.get_device_capability()
    arch = (
        f"sm_{major}{minor}{'a' if major >= 9 else ''}"  # sm_90a: Hopper's own instructions (setmaxnreg, ...)
    )
    flags = build_flags(arch, defines, extra)
    folder = build_folder(name, arch, flags, nvcc)
    from torch.utils.cpp_extension import load as cpp_load

    try:
        folder.mkdir(parents=True, exist_ok=True)
        with build_lock(folder, name):
            before = _built(folder)
            # a first build is silent for a minute or more (the CUTLASS GEMM's two): say so first
            if not before:
                print(f"roseinfer.cuda_ext: building {name} for {arch} (a first build takes a minute or two; later "
                      f"processes reuse it)", file=sys.stderr, flush=True)  # fmt: skip
            main = staged_sources(name, folder)
            t0 = time.perf_counter()
            try:
                module = cpp_load(
                    name=folder.name.replace("-", "_").replace(".", "_"),
                    sources=[str(main)],
                    extra_cuda_cflags=list(flags),
                    extra_cflags=["-O3"],
                    build_directory=str(folder),
                    verbose=False,
                )
            except Exception as e:  # a compiler error: say it once, fall back
                line = str(e).strip().splitlines()[-1] if str(e).strip() else type(e).__name__
                return _not_built(name, f"build failed: {line}")
            rebuilt = _built(folder) != before
    # a cache folder this process cannot write (read-only, full), a source it cannot read
    except OSError as e:
        return _not_built(name, f"{e.filename or folder}: {e.strerror or e}")
    if rebuilt:
        print(f"roseinfer.cuda_ext: built {name} for {arch} in {time.perf_counter() - t0:.1f} s ({folder})",
              file=sys.stderr)  # fmt: skip
    _WHY_NOT.pop(name, None)
    return module


def _built(folder: Path) -> dict[str, int]:
    """The folder's built modules and their mtimes: a load that changed them built (ninja decides, not us)."""
    return {p.name: p.stat().st_mtime_ns for p in folder.glob("*.so")}


@contextlib.contextmanager
def build_lock(folder: Path, name: str):
    """Hold `folder`'s build lock (an flock on `folder/build.flock`, which then names its holder) for the block: a
    second load waits for the first one's, saying so (and who holds it) once it has waited WAIT_NOTICE_S, rather
    than building beside it. The kernel drops an flock when its holder dies, so a build killed midway leaves
    nothing that blocks the next. torch's own lock (the file `lock`, which it creates and deletes around every
    load) is left behind by a build killed by a signal (a timeout, the OOM killer), and torch then waits for it
    forever: every load of this folder takes this lock first (BUILD_LAYOUT keeps other code out of it), so under
    it torch's is stale, and removed.
    Limits: where the filesystem has no flock (NFS without its lock daemon, some FUSE mounts) the build goes on
    without it and torch's lock stays the only one; a cache shared between hosts (NFS with `nolock` or a local
    flock) locks per host only, so two hosts may build one folder at once (point $ROSEINFER_CUDA_EXT_CACHE at a
    local disk); where only the Python process is killed (kill -9) while its ninja still compiles, the next load
    may start a second ninja in the folder."""
    import fcntl  # POSIX: imported where a build needs it

    path = folder / "build.flock"
    with open(path, "a+", encoding="utf-8", errors="backslashreplace") as f:
        locked = _take_lock(f, path, name)
        if locked:
            (folder / "lock").unlink(missing_ok=True)
            _holder_record(f, f"pid {os.getpid()}: {' '.join(sys.argv)[:300]}\n")
        try:
            yield
        finally:
            if locked:
                _holder_record(f, "")  # no holder now
                fcntl.flock(f, fcntl.LOCK_UN)


def _holder_record(f, text: str) -> None:
    """Write who holds the lock into its file, for a waiter to name (advisory: a failure loses only that)."""
    with contextlib.suppress(OSError, ValueError):
        f.truncate(0)
        f.write(text)
        f.flush()


def _take_lock(f, path: Path, name: str) -> bool:
    """Take the flock on `f` (the open `path`), waiting for it (True), or False where the filesystem has none."""
    import fcntl

    waited_from = time.monotonic()
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() - waited_from >= WAIT_NOTICE_S:
                break
            time.sleep(0.05)
        except OSError:
            return False
    try:
        holder = path.read_text(encoding="utf-8", errors="replace").strip() or "holder unknown"
    except OSError:
        holder = "holder unknown"
    print(
        f"roseinfer.cuda_ext: waiting for another build of {name} in {path.parent} ({holder})",
        file=sys.stderr,
    )
    fcntl.flock(f, fcntl.LOCK_EX)
    return True


def staged_sources(name: str, folder: Path) -> Path:
    """Copies of `sources(name)` in `folder/src` (rewritten where their bytes differ), and the path of the main
    one: what the build compiles. Its folder is keyed by the sources' bytes, but ninja rebuilds when a source's
    path changes, so two checkouts of the same sources that each built from their own path rebuilt each other's
    build at every first use (70 s each, on an H200's machine). Called under `build_lock`."""
    src = folder / "src"
    src.mkdir(exist_ok=True)
    paths = sources(name)
    for path in paths:
        copy = src / path.name
        data = path.read_bytes()
        if not copy.is_file() or copy.read_bytes() != data:
            tmp = copy.with_name(copy.name + ".tmp")
            tmp.write_bytes(data)
            os.replace(tmp, copy)  # whole, or not at all
    return src / paths[0].name


def _not_built(name: str, why: str):
    _WHY_NOT[name] = f"not built: {why}"
    return None
