"""Regions inside a fused kernel (issue 50): a stamps file (roseinfer/cuda_ext/stamps.py) read into GPU ranges of
the kernel launches it describes.

A fused kernel's blocks write %globaltimer at its phase boundaries; its host code appends one JSON line per launch
(`{"v": 1, "kernel", "regions": [n names], "bounds_ns": [n + 1 times]}`, in launch order) to the file a capture
names in `$ROSEINFER_KERNEL_STAMPS` (the run folder's kernel_stamps.jsonl) or the user hands to `roseprof import
--stamps`. `attach` turns them into ordinary ranges of the model, on GPU tracks (model.gpu_track), whatever tool
wrote the trace:

- Matching: the k-th line of kernel K is the k-th launch, by start, of the kernels whose name contains K as a word
  (Kineto and nsys name `fused_mlp_kernel` as `void (anonymous namespace)::fused_mlp_kernel<...>(...)`). Where the
  counts differ (a profiler that recorded only part of the program, a file of another run) no launch of K gets
  ranges and the run's warnings say so: a guess could put every region on the wrong launch.
- Processes: a line with a `pid` (tensor-parallel ranks append to one file) matches only launches that process
  made, where the trace knows the thread that launched them. Where the file and the trace each have one process
  for K, the two are the same program whatever their pids (a profiler in another pid namespace).
- Placing: %globaltimer is the GPU's clock, not the trace's, so phase k is placed at the launch's start plus
  b_k - b_0, and cut at the launch's end (what no stamp sees, the blocks' dispatch and the grid's retirement, is
  left at the end; a phase that would end past the launch is cut there, and the warnings count such launches).
- Tracks: one per (device, stream), with a lane more where launches overlap (programmatic dependent launches), so
  the ranges of one track never overlap; each track's process is the one that launched the kernel.

The ranges are then regions like any other (count, total, self time; their GPU time is their own span:
analysis/ranges.py), so show, the dashboard, diff and the Perfetto export have them with no branch of their own.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from roseprof.errors import RoseprofError
from roseprof.model import KERNEL, START_END, Ranges, Trace, gpu_track

MAX_REGIONS = 256  # phases of one launch: more is damage, not a kernel
MAX_LINE = 1 << 20  # bytes of one line


@dataclass(frozen=True)
class Launch:
    """One stamped launch: its kernel function's name, its phases' region names [n] and bounds [n + 1] (ns, the
    GPU's clock, non-decreasing)."""

    kernel: str
    regions: tuple[str, ...]
    bounds: tuple[int, ...]
    # the process that launched it (None: a file from before tensor parallelism's stamps)
    pid: int | None = None


def read_stamps(path: Path, label: str) -> tuple[list[Launch], list[str]]:
    """(launches in file order, warnings) of a stamps file; a damaged line costs that line (a warning), a file with
    no launch at all is refused in one line naming `label`."""
    launches, bad, lines = [], 0, 0
    try:
        with open(path, "rb") as fh:
            for raw in fh:
                lines += 1
                launch = _launch(raw) if len(raw) <= MAX_LINE and raw.strip() else None
                if launch is None:
                    bad += raw.strip() != b""
                else:
                    launches.append(launch)
    except OSError as e:
        raise RoseprofError(f"{label}: cannot read ({e.strerror})") from None
    if not launches:
        raise RoseprofError(
            f"{label}: not a kernel stamps file (none of its {lines} line(s) is a launch's stamps)"
        )
    warnings = [f"{label}: {bad} damaged line(s) left out"] if bad else []
    return launches, warnings


def _launch(raw: bytes) -> Launch | None:
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict) or doc.get("v") != 1:
        return None
    kernel, regions, bounds = doc.get("kernel"), doc.get("regions"), doc.get("bounds_ns")
    if not (isinstance(kernel, str) and kernel and isinstance(regions, list) and isinstance(bounds, list)):
        return None
    if not (0 < len(regions) <= MAX_REGIONS and len(bounds) == len(regions) + 1):
        return None
    if not all(isinstance(r, str) and r for r in regions):
        return None
    if not all(isinstance(b, int) and not isinstance(b, bool) and 0 <= b < 1 << 63 for b in bounds):
        return None
    if any(b > a for a, b in zip(bounds[1:], bounds)):  # a boundary before the one in front: no launch's
        return None
    pid = doc.get("pid")
    if pid is not None and not (isinstance(pid, int) and not isinstance(pid, bool) and pid >= 0):
        return None
    return Launch(kernel, tuple(regions), tuple(bounds), pid)


def attach(trace: Trace, launches: list[Launch], label: str) -> None:
    """Add each stamped launch's phases to `trace` as GPU ranges (in place: ranges, names, threads, thread_pids,
    warnings)."""
    o = trace.ops
    kernels = np.flatnonzero(o.kind == KERNEL)  # by start: GpuOps are sorted so
    # each launch's process, where the trace knows the thread that launched it (-1: it does not)
    pids = trace.pids(o.api_tid[kernels])
    by_kernel: dict[str, dict[int | None, list[Launch]]] = {}
    for launch in launches:
        by_kernel.setdefault(launch.kernel, {}).setdefault(launch.pid, []).append(launch)
    ids = np.unique(o.name[kernels])
    ops, placed = [], []
    for kernel, by_pid in by_kernel.items():
        word = re.compile(r"(?<![A-Za-z0-9_])" + re.escape(kernel) + r"(?![A-Za-z0-9_])")
        matching = [i for i in ids.tolist() if word.search(trace.names[i])]
        is_kernel = np.isin(o.name[kernels], matching)
        traced = set(pids[is_kernel].tolist()) - {-1}
        for pid, stamped in by_pid.items():
            found = kernels[is_kernel]
            by_process = pid is not None and traced and not (len(by_pid) == 1 and len(traced) == 1)
            if by_process:
                found = kernels[is_kernel & (pids == pid)]
            if len(found) != len(stamped):
                of = f" of {kernel}" + (f" by process {pid}" if by_process else "")
                why = "launches are matched in order, so the counts must agree"
                if by_process and pid not in traced:
                    why = f"no launch of it in the trace is process {pid}'s: a stamps file of another run?"
                trace.warnings.append(
                    f"{label}: {len(stamped):,} launch(es){of} stamped, the trace has {len(found):,}: "
                    f"their regions are left out ({why})"
                )
                continue
            ops += found.tolist()
            placed += stamped
    if not ops:
        return
    _add_ranges(trace, np.asarray(ops, dtype=np.int64), placed, label)


def _add_ranges(trace: Trace, ops: np.ndarray, launches: list[Launch], label: str) -> None:
    o, names = trace.ops, trace.names
    lanes = _lanes(o.device[ops], o.stream[ops], o.start[ops], o.end[ops])
    start, end, name, tid, cut = [], [], [], [], 0
    for op, lane, launch in zip(ops.tolist(), lanes.tolist(), launches):
        t0, t1 = int(o.start[op]), int(o.end[op])
        at = [min(t0 + b - launch.bounds[0], t1) for b in launch.bounds]
        cut += launch.bounds[-1] - launch.bounds[0] > t1 - t0
        track = gpu_track(int(o.device[op]), int(o.stream[op]), lane)
        if track not in trace.threads:
            d, s = int(o.device[op]), int(o.stream[op])
            trace.threads[track] = f"GPU {d} stream {s} regions" + (f" ({lane + 1})" if lane else "")
            pid = trace.thread_pids.get(int(o.api_tid[op])) if o.api_tid[op] >= 0 else None
            if pid is not None:
                trace.thread_pids[track] = pid
        for region, a, b in zip(launch.regions, at, at[1:]):
            start.append(a)
            end.append(b)
            name.append(names.intern(region))
            tid.append(track)
    if cut:
        trace.warnings.append(
            f"{label}: {cut:,} of {len(ops):,} stamped launch(es) span longer than the kernel ran; their last "
            "regions are cut at the kernel's end"
        )
    r, n = trace.ranges, len(start)
    trace.ranges = Ranges(
        np.concatenate([r.start, np.asarray(start, dtype=np.int64)]),
        np.concatenate([r.end, np.asarray(end, dtype=np.int64)]),
        np.concatenate([r.name, np.asarray(name, dtype=np.int64)]),
        np.concatenate([r.domain, np.zeros(n, dtype=np.int64)]),
        np.concatenate([r.tid, np.asarray(tid, dtype=np.int64)]),
        np.concatenate([r.style, np.full(n, START_END, dtype=np.int64)]),
    ).sort()


def _lanes(device: np.ndarray, stream: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """[L] a lane per launch: the first of its (device, stream) whose launches all ended by its start."""
    lanes = np.zeros(len(start), dtype=np.int64)
    free: dict[tuple[int, int], list[int]] = {}  # (device, stream) -> each lane's last end
    for i in np.lexsort((start, stream, device)).tolist():
        ends = free.setdefault((int(device[i]), int(stream[i])), [])
        lane = next((k for k, e in enumerate(ends) if e <= start[i]), len(ends))
        if lane == len(ends):
            ends.append(0)
        ends[lane] = int(end[i])
        lanes[i] = lane
    return lanes
