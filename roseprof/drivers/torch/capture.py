"""`roseprof torch`: run a command with torch.profiler on and read the Kineto trace(s) it writes.

The engine profiles itself when ROSEINFER_TORCH_PROFILE=DIR is set (roseinfer/tracing.py: a schedule of decode
steps, record_function spans on). Any other program gets the same folder as ROSEPROF_TORCH_TRACE_DIR and writes
its trace there itself, e.g. `on_trace_ready=torch.profiler.tensorboard_trace_handler(DIR)` or
`prof.export_chrome_trace(DIR + "/trace.json.gz")`. Every .json / .json.gz file found there is read; several
(one per process or rank) are merged into one run, each process kept on its own threads.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from roseprof.drivers.base import Launch
from roseprof.errors import NothingWritten, RoseprofError
from roseprof.model import GpuOps, HostEvents, Marks, Names, Process, Ranges, Trace
from roseprof.workload.roseinfer import (
    RECORD_FUNCTION_ENV,
    TORCH_PROFILE_CPU_ONLY_ENV,
    TORCH_PROFILE_ENV,
    TORCH_PROFILE_SCHEDULE,
    TORCH_PROFILE_SCHEDULE_ENV,
    TORCH_PROFILE_WITH_STACK_ENV,
    default_command,
)

TRACE_DIR_ENV = "ROSEPROF_TORCH_TRACE_DIR"  # where a program that is not the engine writes its trace
TRACE_FOLDER = "torch"  # inside the run's raw/
# Kineto's (torch.profiler's library's) progress lines on the program's stderr, e.g. `USDT:2026-12-01 10:09:44
# 9924:9924 SyncActivityProfilerHandler.cpp:52] profiler_start` (torch 2.13 prints these two whatever
# KINETO_LOG_LEVEL says): the tool's own, kept in raw/torch.log. Its WARNING and ERROR lines still show.
KINETO_PROGRESS = re.compile(rb"^(USDT|STAGE|INFO):\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \d+:\d+ [\w.]+:\d+\] ")


@dataclass(frozen=True)
class TorchOptions:
    """`roseprof torch`'s options: the engine's window of decode steps and what torch.profiler records."""

    tool: ClassVar[str] = "torch"

    wait: int = TORCH_PROFILE_SCHEDULE[0]  # decode steps skipped before the window
    warmup: int = TORCH_PROFILE_SCHEDULE[1]  # decode steps profiled and discarded
    active: int = TORCH_PROFILE_SCHEDULE[2]  # decode steps recorded
    with_stack: bool = False
    cpu_only: bool = False

    def default_command(self) -> list[str]:
        """What runs when no command is given: the engine's benchmark sized for the machine."""
        return default_command()

    def resolve(self, cmd: list[str] | None, source) -> tuple[TorchOptions, list[str] | None]:
        """These options and the command as they run (nothing here is taken from another run)."""
        return self, cmd


class TorchCapture:
    tool = "torch"
    kernel_stamps = True
    injection_library = None

    def __init__(self, options: TorchOptions, has_gpu: bool = False) -> None:
        wait, warmup, active = options.wait, options.warmup, options.active
        if wait < 0 or warmup < 0 or active < 1:
            raise RoseprofError("--wait and --warmup must be >= 0 and --active >= 1")
        self.schedule = (wait, warmup, active)
        self.with_stack = options.with_stack
        self.cpu_only = options.cpu_only

    def engine_env(self) -> dict[str, str]:
        return {
            RECORD_FUNCTION_ENV: "1",
            TORCH_PROFILE_SCHEDULE_ENV: ",".join(map(str, self.schedule)),
            TORCH_PROFILE_WITH_STACK_ENV: "1" if self.with_stack else "0",
            TORCH_PROFILE_CPU_ONLY_ENV: "1" if self.cpu_only else "0",
        }

    def describe(self) -> dict:
        wait, warmup, active = self.schedule
        return {
            # The installed torch (the program's own may differ: its trace's version, where it states one, wins).
            "version": installed_torch(),
            "schedule": {"wait": wait, "warmup": warmup, "active": active},
            "with_stack": self.with_stack,
            "cpu_only": self.cpu_only,
        }

    @contextmanager
    def launch(self, cmd: list[str], env: dict[str, str], raw: Path) -> Iterator[Launch]:
        """The program itself is the tool: it writes its trace into raw/torch/ (Ctrl-C reaches it once, and the
        engine writes what its profiler holds); its output, all the program's own, goes to the terminal."""
        out = raw / TRACE_FOLDER
        out.mkdir(exist_ok=True)
        yield Launch(
            list(cmd), {**env, TORCH_PROFILE_ENV: str(out), TRACE_DIR_ENV: str(out)}, raw / "torch.log"
        )

    def own_line(self, line: bytes) -> bool:
        return bool(KINETO_PROGRESS.match(line))

    def held_line(self, line: bytes) -> bool:
        return False

    def settle(self) -> None:
        return None  # nothing of an earlier capture outlives it

    def refused(self, launch: Launch) -> str | None:
        return None

    def check(self, result, raw: Path) -> None:
        return None  # a missing trace is said by collect

    def collect(self, raw: Path) -> Trace:
        files = trace_files(raw / TRACE_FOLDER)
        if not files:
            wait, warmup, _ = self.schedule
            # The program ran and wrote no trace: nothing to analyse (the pipeline says whose fault), not a
            # profiler failure.
            raise NothingWritten(
                f"no torch.profiler trace was written (the engine writes one after {wait}+{warmup} decode "
                f"steps; another program must run torch.profiler and write its trace into ${TRACE_DIR_ENV}, "
                "e.g. with on_trace_ready=torch.profiler.tensorboard_trace_handler(os.environ["
                f"'{TRACE_DIR_ENV}']))"
            )
        trace = read_traces(files)
        if trace.tool.version == "?":
            # A program's own trace does not say which torch wrote it (the engine adds it): the installed one.
            trace.tool = dataclasses.replace(trace.tool, version=installed_torch() or "?")
        return trace


def installed_torch() -> str | None:
    """torch's version in this environment, from its package metadata (importing torch would take seconds)."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


def trace_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(
        p for p in folder.rglob("*") if p.is_file() and p.name.lower().endswith((".json", ".json.gz"))
    )


def read_traces(files: list[Path]) -> Trace:
    from roseprof.drivers.torch.reader import read_kineto

    traces = [read_kineto(p, p.parent, str(p)) for p in files]
    return traces[0] if len(traces) == 1 else merge(traces, [str(p) for p in files])


# A pid two traces share (two hosts, or two containers, each with its own pid 1234) moves up by this much per
# trace: Linux pids stay below 2**22, and the model's thread id keeps 31 bits of pid (reader.thread_id).
PID_STRIDE = 1 << 22
MAX_PID = (1 << 31) - 1
# Files whose events lie further apart than this on the Unix clock are not one run's: the ranks of one run are
# profiled together (one host's clock agrees exactly, NTP keeps hosts within milliseconds), while another run's file
# was written seconds to days away (a model loads for seconds), as is one whose baseTimeNanoseconds is off.
APART_NS = 1_000_000_000


def merge(traces: Iterable[Trace], labels: list[str] | None = None) -> Trace:
    """Several traces of one run (processes, ranks) as one: names re-interned, threads kept apart.

    Their clocks must agree (Kineto's Unix time): times are moved onto the first trace's base, and a file whose
    events then lie over APART_NS from the first file's is refused, in one line naming it (labels: the files'
    names). Each trace's processes are kept with their ranks; where a pid is already taken by an earlier trace,
    that trace's threads move to a pid of their own (its name says which pid it had), so two ranks never share a
    process.

    `traces` may be a generator (read_many's: one file read at a time): each trace is let go once its columns are
    moved into the merge's parts, and each part once it is joined, so the peak holds about two copies of the run's
    columns, not every trace beside its parts and the join (8 ranks of 40 MB: docs/BENCHMARKS.md, session 27).
    """
    traces = iter(traces)
    labels = list(labels or [])
    first = next(traces, None)
    if first is None:
        raise RoseprofError("no trace to merge")
    base, tool, clock = first.session_start_utc_ns, first.tool, first.clock
    spans: list[tuple[int, int] | None] = []
    names = Names()
    parts_r, parts_o, parts_h, threads, gpus, warnings = [], [], [], {}, [], []
    thread_pids: dict[int, int] = {}
    processes: dict[int, Process] = {}
    k, t = 0, first
    del first
    while t is not None:
        if len(labels) <= k:
            labels.append(f"trace {k}")
        t = _own_pids(t, k, processes)
        remap = names.intern_many(t.names.values)
        shift = 0
        if base is not None and t.session_start_utc_ns is not None:
            shift = t.session_start_utc_ns - base
        spans.append(_span(t, shift))
        _one_run(spans, labels, k)
        r = t.ranges
        parts_r.append(
            Ranges(
                r.start + shift, r.end + shift, remap[r.name] if len(r) else r.name, r.domain, r.tid, r.style
            )
        )
        o = t.ops
        api_name = np.where(o.api_name >= 0, remap[np.maximum(o.api_name, 0)] if len(remap) else -1, -1)
        api_shift = np.where(o.api_start >= 0, shift, 0)
        parts_o.append(
            GpuOps(o.kind, o.start + shift, o.end + shift, remap[o.name] if len(o) else o.name, o.device, o.stream,
                   o.graph_node, o.api_start + api_shift, o.api_end + api_shift, o.api_tid, api_name)
        )  # fmt: skip
        h = t.host_events
        shape = h.shapes()
        shape = np.where(shape >= 0, remap[np.maximum(shape, 0)] if len(remap) else -1, -1)
        parts_h.append(
            HostEvents(
                h.start + shift, h.end + shift, remap[h.name] if len(h) else h.name, h.tid, h.kind, shape
            )
        )
        threads.update(t.threads)
        thread_pids.update(t.thread_pids)
        processes.update(t.processes)
        gpus += [g for g in t.gpus if g not in gpus]
        warnings += [w for w in t.warnings if w not in warnings]  # one file's caveat said once
        t = None  # let this trace go before the next is read
        k, t = k + 1, next(traces, None)
    ranges = Ranges(*(_join(parts_r, f) for f in ("start", "end", "name", "domain", "tid", "style"))).sort()
    cat = {f: _join(parts_o, f) for f in GpuOps.COLUMNS}
    order = np.argsort(cat["start"], kind="stable")
    ops = GpuOps(**{f: cat.pop(f)[order] for f in GpuOps.COLUMNS})
    host = HostEvents(*(_join(parts_h, f) for f in (*HostEvents.COLUMNS, "shape")))
    return Trace(tool=tool, names=names, ranges=ranges, marks=Marks(), ops=ops, threads=threads, gpus=gpus,
                 session_start_utc_ns=base, clock=clock, warnings=warnings,
                 host_events=host, thread_pids=thread_pids, processes=processes)  # fmt: skip


def _join(parts: list, field: str) -> np.ndarray:
    """One column of the merge's parts joined, each part's column let go once joined (the parts are read no more)."""
    out = np.concatenate([getattr(p, field) for p in parts])
    for p in parts:
        setattr(p, field, None)
    return out


def _span(trace: Trace, shift: int) -> tuple[int, int] | None:
    """(first start, last end) of the trace's ranges and GPU ops moved by `shift`, None where it holds neither."""
    starts = [a.min() for a in (trace.ranges.start, trace.ops.start) if len(a)]
    ends = [a.max() for a in (trace.ranges.end, trace.ops.end) if len(a)]
    return (int(min(starts)) + shift, int(max(ends)) + shift) if starts else None


def _one_run(spans: list[tuple[int, int] | None], labels: list[str], k: int) -> None:
    """RoseprofError when the k-th file's events lie over APART_NS from the first file's on the one clock."""
    if k == 0 or spans[0] is None or spans[k] is None:
        return
    (a0, a1), (b0, b1) = spans[0], spans[k]
    gap = max(b0 - a1, a0 - b1)
    if gap > APART_NS:
        when = "after" if b0 > a1 else "before"
        raise RoseprofError(
            f"{labels[k]}: its events lie {_long(gap)} {when} those of {labels[0]} (each on its file's "
            "baseTimeNanoseconds): not one run's files (another run's rank?), or a clock base that is off; not merged"
        )


def _long(ns: int) -> str:
    s = ns / 1e9
    for unit, size in (("days", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:,.1f} {unit}"
    return f"{s:.1f} s"


def _own_pids(trace: Trace, k: int, taken: dict[int, Process]) -> Trace:
    """`trace` (the k-th of a merge) with every pid an earlier trace took moved to a free one: its thread ids
    (pid << 32 | tid) rewritten in every column that holds them."""
    moved: dict[int, int] = {}
    for pid in trace.processes:
        if pid not in taken:
            continue
        new = pid + k * PID_STRIDE
        while new in taken or new in trace.processes or new in moved.values():
            new += PID_STRIDE
        if new > MAX_PID:
            raise RoseprofError(f"too many traces share pid {pid} to keep them apart")
        moved[pid] = new
    if not moved:
        return trace
    old = np.fromiter(moved, dtype=np.int64)
    new = np.fromiter(moved.values(), dtype=np.int64)

    def retid(tids: np.ndarray) -> np.ndarray:
        tids = np.asarray(tids, dtype=np.int64)
        pid = tids >> 32
        hit = np.isin(pid, old) & (tids >= 0)
        out = tids.copy()
        out[hit] = (_map(pid[hit], old, new) << 32) | (tids[hit] & 0xFFFFFFFF)
        return out

    r, o, h = trace.ranges, trace.ops, trace.host_events
    processes = {}
    for pid, pr in trace.processes.items():
        to = moved.get(pid, pid)
        name = f"{pr.name} (pid {pid} in its own file)".strip() if pid in moved else pr.name
        processes[to] = dataclasses.replace(pr, pid=to, name=name)
    tids = np.fromiter(trace.thread_pids, dtype=np.int64, count=len(trace.thread_pids))
    return dataclasses.replace(
        trace,
        ranges=Ranges(r.start, r.end, r.name, r.domain, retid(r.tid), r.style),
        ops=dataclasses.replace(o, api_tid=np.where(o.api_tid >= 0, retid(o.api_tid), o.api_tid)),
        host_events=dataclasses.replace(h, tid=retid(h.tid)),
        threads={int(retid(np.array([t]))[0]): n for t, n in trace.threads.items()},
        thread_pids=dict(zip(retid(tids).tolist(), (retid(tids) >> 32).tolist())),
        processes=processes,
    )


def _map(keys: np.ndarray, old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """[N] new[i] for each key equal to old[i] (every key is one of old)."""
    order = np.argsort(old)
    return new[order][np.searchsorted(old[order], keys)]
