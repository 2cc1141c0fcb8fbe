"""Kernel names a tool left mangled, demangled as GNU's demangler writes them (`void ns::f<8, float>(int)`).

torch.profiler (Kineto) demangles each kernel's name with libstdc++'s `__cxa_demangle`, which gives up on a name
nested deeper than libiberty's recursion limit: a CUTLASS 3 GEMM's name (about 1,100 mangled characters, 4,900
demangled) stays `_ZN7cutlass13device_kernelINS_4gemm...`, unreadable, cut in the middle in a table, and matching
nothing in Nsight Compute's demangled names. binutils' `c++filt --no-recurse-limit` is the same demangler without
that limit, so such a name reads as the trace's other kernels do (tests/data/torch/h200-torch2.11-roseinfer-cutlass*:
the engine's CUTLASS GEMMs under `roseprof torch`)."""

from __future__ import annotations

import re
import shutil
import subprocess

# What c++filt gets: the Itanium C++ ABI's mangled names (GCC, Clang, NVCC on Linux), one a line, none it would read
# as two (it demangles every word of a line) or as two lines (a `\r`)
_MANGLED = re.compile(r"_Z[A-Za-z0-9_.$]+")
CXXFILT = "c++filt"
TIMEOUT_S = 60.0


def demangle(names: list[str]) -> tuple[list[str], str | None]:
    """(the names, each Itanium-mangled one demangled where c++filt can; a warning when some stay mangled, or
    None). One c++filt process for all of them; a name c++filt cannot read it leaves as it was."""
    mangled = sorted({n for n in names if _MANGLED.fullmatch(n)})
    if not mangled:
        return names, None
    readable = _cxxfilt(mangled)
    if readable is None:
        return names, (
            f"{len(mangled)} kernel name(s) are left mangled (`{mangled[0][:40]}...`): demangling them needs "
            f"{CXXFILT} (binutils), which {'is not on PATH' if shutil.which(CXXFILT) is None else 'failed'}"
        )
    table = dict(zip(mangled, readable))
    left = sum(1 for m, r in table.items() if r == m)
    out = [table.get(n, n) for n in names]
    if left:
        return out, f"{left} kernel name(s) are left mangled: {CXXFILT} could not demangle them"
    return out, None


def _cxxfilt(mangled: list[str]) -> list[str] | None:
    """c++filt's reading of each name (one a line, in order), or None where it cannot run or answers with another
    number of lines. binutils before 2.32 has no --no-recurse-limit: it runs without it there (the deepest names
    then stay mangled)."""
    exe = shutil.which(CXXFILT)
    if exe is None:
        return None
    text = "\n".join(mangled) + "\n"
    for argv in ([exe, "--no-recurse-limit"], [exe]):
        try:
            done = subprocess.run(
                argv, input=text, capture_output=True, encoding="utf-8", errors="replace", timeout=TIMEOUT_S
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        lines = done.stdout.split("\n")
        if done.returncode == 0 and len(lines) == len(mangled) + 1 and lines[-1] == "":
            return lines[:-1]
    return None
