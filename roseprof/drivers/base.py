"""What a driver is made of, apart from the registry that lists the drivers (drivers/__init__.py): a `Reader` (a
tool's file -> the run model), a `Launch` (how a tool runs the user's program) and `find_tool` (a profiler's
executable). Every driver imports these from here, so the registry can import the drivers without a circle."""

from __future__ import annotations

import glob
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from roseprof.errors import RoseprofError
from roseprof.model import Trace

SNIFF_BYTES = 4096


@dataclass(frozen=True)
class Limits:
    """What one import may cost, whatever its file says: a gzip file inflates, past `gzip_after_bytes` of it, at
    most `gzip_ratio` times the compressed bytes read so far. Real Kineto traces inflate 13-30x (tests/data; a 2.4 GB
    trace from a 300 MB gzip: 8x); a decompression bomb far more (9.35 MB to 2.5 GiB: 270x), and it exhausts memory
    long before its end. `roseprof import --max-gzip-ratio` raises the ratio."""

    gzip_ratio: float = 100.0
    gzip_after_bytes: int = 1 << 30

    def check_inflated(self, inflated: int, compressed: int, label: str) -> None:
        if inflated > self.gzip_after_bytes and inflated > self.gzip_ratio * max(compressed, 1):
            raise RoseprofError(
                f"{label}: inflates over {self.gzip_ratio:g}x ({_size(inflated)} of JSON from {_size(compressed)} "
                f"of gzip, past the first {_size(self.gzip_after_bytes)}): a decompression bomb, not a trace; "
                "refused (--max-gzip-ratio raises the limit)"
            )


def _size(n: int) -> str:
    return f"{n / (1 << 30):.1f} GiB" if n >= 1 << 30 else f"{n / (1 << 20):.1f} MiB"


@dataclass(frozen=True)
class Reader:
    """How one tool's file becomes a Trace.

    read(path, raw_dir, label, limits): `path` is the run's own copy of the user's file (in raw_dir, where any
    conversion, e.g. an nsys export, also writes); `label` is how errors name the file: the user's path; `limits`
    (Limits, or None for the defaults) bound what reading it may inflate.
    """

    tool: str
    description: str  # e.g. "nsys .sqlite export"
    suffixes: tuple[str, ...]  # lower-case, with the dot; matched against the end of the name
    sniff: Callable[[bytes], bool]  # True when the file's first SNIFF_BYTES bytes look like this format
    read: Callable[[Path, Path, str, Limits | None], Trace]
    # read_many(paths, raw_dir, labels, limits): several files of one run (one per rank) as one Trace; None where the
    # tool writes one file for every process (nsys) or has no timeline to merge (ncu)
    read_many: Callable[[list[Path], Path, list[str], Limits | None], Trace] | None = None


@dataclass(frozen=True)
class Launch:
    """How a driver's tool runs the user's program: what capture/process.py needs to run it (in its own
    session, under the tool's lock), the same for every tool."""

    argv: list[str]  # the tool's command line, the user's command included
    env: dict[str, str]  # the whole environment the tool starts with
    log: Path  # where the tool's whole output is kept (raw/<tool>.log)
    # The tool's stdout and stderr as one stream, shown on roseprof's stderr: for a tool that interleaves its
    # own lines with the program's on one pipe (ncu), so that roseprof's stdout stays its own.
    one_stream: bool = False


def find_tool(env_var: str, exe: str, candidates: tuple[str, ...]) -> str | None:
    """A profiler's executable: the path in `env_var` (only that, when set), else on PATH, else the first
    executable match of `candidates` (glob patterns of the usual install folders, newest first in each)."""
    env = os.environ.get(env_var)
    if env:
        return env if os.access(env, os.X_OK) else None
    on_path = shutil.which(exe)
    if on_path:
        return on_path
    for pattern in candidates:
        for path in sorted(glob.glob(pattern), reverse=True):
            if os.access(path, os.X_OK):
                return path
    return None
