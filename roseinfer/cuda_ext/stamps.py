"""The stamps file: how a fused kernel's regions reach a profile (issue 50).

A kernel that stamps its phases (`fused_mlp.MlpScratch(stamps=True)`, `fused_attn.AttnScratch(stamps=True)`)
leaves one launch's %globaltimer stamps in a device buffer; its host code, after the launch has run, reduces them
to the phase boundaries and appends one JSON line per launch to the file named by `$ROSEINFER_KERNEL_STAMPS` (a roseprof capture sets it to the run folder's
`kernel_stamps.jsonl`, as it sets the step log; `roseprof import --stamps FILE` takes one written elsewhere):

    {"v": 1, "kernel": "fused_mlp_kernel", "regions": [R0, ..., Rn-1], "pid": P, "bounds_ns": [b0, ..., bn]}

`kernel`: the kernel function's name (the profiler's kernel name contains it as a word); `regions`: the engine's
region names of its phases (roseinfer/names.py); `pid`: the process that launched it (tensor-parallel ranks append
to one file; older files have none); `bounds_ns`: n+1 times on the GPU's clock, phase k from b_k to b_k+1. Lines
are in launch order: roseprof matches the k-th line of a kernel (of a process) to the k-th launch of that kernel
(by that process) in the trace and places the phases from the launch's start (%globaltimer is not the trace's
clock).

Torch-free: the caller hands the boundaries as plain ints.
"""

from __future__ import annotations

import json
import os
import weakref
from pathlib import Path

from roseinfer.names import KERNEL_STAMPS_VERSION, ROSEINFER_KERNEL_STAMPS


def phase_bounds(stamps, nstamp: int) -> list[int]:
    """One launch's stamps [blocks, nstamp] (a tensor or nested lists of ns) -> the nstamp phase boundaries (ns,
    the GPU's clock): the earliest block's start, then each boundary where the last block passed it."""
    rows = stamps.tolist() if hasattr(stamps, "tolist") else stamps
    if not rows or any(len(r) != nstamp for r in rows):
        raise ValueError(f"stamps must be [blocks, {nstamp}]")
    return [min(r[0] for r in rows)] + [max(r[k] for r in rows) for k in range(1, nstamp)]


def phase_ranges(stamps, phases) -> list[tuple[str, str, int, int]]:
    """One launch's stamps [blocks, len(phases) + 1] -> [(phase, region, start_ns, end_ns)] for each (phase, region)
    of `phases`, in order: the first from the earliest block's start, each boundary where the last block passed
    it, so the ranges are contiguous and cover first start to last end."""
    bounds = phase_bounds(stamps, len(phases) + 1)
    return [(phase, region, bounds[k], bounds[k + 1]) for k, (phase, region) in enumerate(phases)]


def stamps_path() -> Path | None:
    """The file this process appends stamps to, or None (no one asked for them)."""
    value = os.environ.get(ROSEINFER_KERNEL_STAMPS)
    return Path(value) if value else None


class StampLog:
    """Appends launches' phase boundaries to a stamps file, one JSON line each, in launch order.

    Each `write` is one append system call of whole lines (O_APPEND, no buffer of its own): a step's lines reach
    the file together, whatever else appends to it (another engine of the process, whose log has its own
    descriptor), and nothing is held in a buffer that a crash would lose."""

    def __init__(self, path: Path | str, pid: int | None = None) -> None:
        self.path = Path(path)
        self.pid = os.getpid() if pid is None else pid  # each line's: the process whose launches they are
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        # a log never closed still frees its descriptor
        self._close_fd = weakref.finalize(self, os.close, self._fd)
        self._formats: dict[tuple[str, tuple[str, ...], int], bytes] = {}

    def record(self, kernel: str, regions: tuple[str, ...] | list[str], bounds_ns: list[int]) -> None:
        self.record_many(kernel, regions, [bounds_ns])

    def record_many(self, kernel: str, regions: tuple[str, ...] | list[str], launches) -> None:
        self.write(self.lines(kernel, regions, launches))

    def lines(self, kernel: str, regions: tuple[str, ...] | list[str], launches) -> bytes:
        """One line per launch (its bounds_ns: a row of `launches`, lists or an int array [launches, bounds]), in
        order: what json.dumps writes, all of them from one format call (made once per kernel and number of
        launches). This runs after every profiled step, and json.dumps of each line took ~15 us (a step of 24
        launches longer than the step itself on an H200); %d takes a third of joining str()s, and one call for a
        step's 12 lines a fraction of 12 calls."""
        n = len(regions) + 1
        if hasattr(launches, "shape"):  # an int array [launches, bounds]
            if launches.ndim != 2:
                raise ValueError(
                    f"launches must be [launches, {n} bounds], not of shape {tuple(launches.shape)}"
                )
            widths, count = {launches.shape[1]}, launches.shape[0]
            flat = launches.ravel().tolist()
        else:
            widths, count = {len(bounds_ns) for bounds_ns in launches}, len(launches)
            flat = [int(b) for bounds_ns in launches for b in bounds_ns]
        if widths - {n}:
            raise ValueError(f"{len(regions)} regions need {n} bounds, not {min(widths - {n})}")
        key = (kernel, tuple(regions), count)
        fmt = self._formats.get(key)
        if fmt is None:
            line = {
                "v": KERNEL_STAMPS_VERSION, "kernel": kernel, "regions": list(regions), "pid": self.pid,
                "bounds_ns": [],
            }  # fmt: skip
            head = json.dumps(line)[: -len("[]}")].replace("%", "%%")
            fmt = self._formats[key] = ((head + "[" + ", ".join(["%d"] * n) + "]}\n") * count).encode()
        return fmt % tuple(flat)

    def write(self, data: bytes) -> None:
        """Append `data` (whole lines) in one system call (a regular file takes it all; the loop is for the rest)."""
        if self._fd is None:
            raise ValueError(f"stamps file {self.path} is closed")
        view = memoryview(data)
        while view:
            view = view[os.write(self._fd, view) :]

    def close(self) -> None:
        if self._fd is not None:
            self._close_fd()
            self._fd = None

    def __enter__(self) -> StampLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
