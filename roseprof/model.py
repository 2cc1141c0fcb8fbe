"""The normalised trace every driver returns, whatever tool wrote the file.

Columns are numpy arrays (one row per event) so a million kernels cost a few arrays, not a million objects.
Every string (range, mark and kernel names, launching API calls) is interned once in one `Names` table and
referred to by index; thread names and domains are small lookups beside it. Times are nanoseconds on the
trace's own clock; an unknown integer is -1.

Invariants (checked by `check`, and by the driver contract test on every fixture):
- ranges are sorted by (thread, start, end descending): parents before children, each thread contiguous;
- push/pop ranges are well nested on their thread (start/end ranges may overlap anything);
- every name index resolves in `names`, every domain index in `domains`;
- end >= start for ranges and GPU ops; GPU ops sorted by start.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# GPU op kinds (GpuOps.kind)
KERNEL, MEMCPY, MEMSET = 0, 1, 2
# Range styles (Ranges.style): pushed/popped on one thread, or started/ended anywhere
PUSH_POP, START_END = 0, 1


def _empty(dtype=np.int64) -> np.ndarray:
    return np.zeros(0, dtype=dtype)


class Names:
    """Strings interned once: every *_name column of a trace indexes this one list."""

    def __init__(self, values: list[str] | None = None) -> None:
        self.values: list[str] = list(values or [])
        self._index = {v: i for i, v in enumerate(self.values)}

    def intern(self, value: str | None) -> int:
        value = "" if value is None else value
        i = self._index.get(value)
        if i is None:
            i = self._index[value] = len(self.values)
            self.values.append(value)
        return i

    def intern_many(self, values) -> np.ndarray:
        out = np.empty(len(values), dtype=np.int64)
        for i, v in enumerate(values):
            out[i] = self.intern(v)
        return out

    def find(self, value: str) -> int:
        """The index of `value`, or -1 when the trace never names it."""
        return self._index.get(value, -1)

    def __getitem__(self, i: int) -> str:
        return self.values[i]

    def __len__(self) -> int:
        return len(self.values)


@dataclass
class Ranges:
    """CPU ranges (NVTX ranges, record_function spans, user annotations) [R]."""

    start: np.ndarray = field(default_factory=_empty)
    end: np.ndarray = field(default_factory=_empty)
    name: np.ndarray = field(default_factory=_empty)  # index into Trace.names
    domain: np.ndarray = field(default_factory=_empty)  # index into Trace.domains (0: the default domain)
    tid: np.ndarray = field(default_factory=_empty)  # the tool's thread id (nsys: globalTid)
    style: np.ndarray = field(default_factory=_empty)  # PUSH_POP or START_END

    def __len__(self) -> int:
        return len(self.start)

    def sort(self) -> Ranges:
        """By thread, then start, then longest first (parents before children)."""
        order = np.lexsort((-self.end, self.start, self.tid))
        return Ranges(*(getattr(self, f)[order] for f in ("start", "end", "name", "domain", "tid", "style")))


@dataclass
class Marks:
    """Instant events (NVTX marks) [M], sorted by time."""

    ts: np.ndarray = field(default_factory=_empty)
    name: np.ndarray = field(default_factory=_empty)
    tid: np.ndarray = field(default_factory=_empty)

    def __len__(self) -> int:
        return len(self.ts)


@dataclass
class GpuOps:
    """Kernels, memcpys and memsets [G], sorted by start, each with the API call that launched it.

    api_* are -1 where no launching call was found (e.g. the tool did not trace the runtime API). A kernel
    replayed by a CUDA graph carries its graph node id (graph_node, -1 otherwise) and its launching call is
    the graph launch.
    """

    kind: np.ndarray = field(default_factory=_empty)  # KERNEL, MEMCPY, MEMSET
    start: np.ndarray = field(default_factory=_empty)
    end: np.ndarray = field(default_factory=_empty)
    name: np.ndarray = field(default_factory=_empty)  # kernels: demangled name; copies/sets: a fixed label
    device: np.ndarray = field(default_factory=_empty)
    stream: np.ndarray = field(default_factory=_empty)
    graph_node: np.ndarray = field(default_factory=_empty)
    api_start: np.ndarray = field(default_factory=_empty)
    api_end: np.ndarray = field(default_factory=_empty)
    api_tid: np.ndarray = field(default_factory=_empty)
    api_name: np.ndarray = field(
        default_factory=_empty
    )  # the launching call's name (index into names), or -1

    COLUMNS = (
        "kind",
        "start",
        "end",
        "name",
        "device",
        "stream",
        "graph_node",
        "api_start",
        "api_end",
        "api_tid",
        "api_name",
    )

    def __len__(self) -> int:
        return len(self.start)


@dataclass
class Tool:
    name: str  # "nsys", "torch", "ncu"
    version: str  # the tool's version as its file states it, or "?"
    format: str | None = None  # the file format's own version (nsys: the export schema)


@dataclass
class Trace:
    tool: Tool
    names: Names = field(default_factory=Names)
    domains: list[str] = field(default_factory=lambda: [""])
    ranges: Ranges = field(default_factory=Ranges)
    marks: Marks = field(default_factory=Marks)
    ops: GpuOps = field(default_factory=GpuOps)
    threads: dict[int, str] = field(default_factory=dict)  # tid -> the thread's name, where the tool knows it
    gpus: list[dict] = field(default_factory=list)
    session_start_utc_ns: int | None = None  # the Unix time (ns) of the trace's time 0, where known
    # The clock of the timestamps where the tool documents it: "realtime" (Unix time; torch.profiler), or None.
    clock: str | None = None
    warnings: list[str] = field(default_factory=list)  # what the reader had to assume or leave out

    @property
    def has_gpu(self) -> bool:
        return len(self.ops) > 0


def check(trace: Trace) -> list[str]:
    """The model's invariants; returns what is violated (empty when the trace is sound)."""
    problems = []
    r, o, n = trace.ranges, trace.ops, len(trace.names)
    if len(r):
        key = np.lexsort((-r.end, r.start, r.tid))
        if not np.array_equal(key, np.arange(len(r))):
            problems.append("ranges are not sorted by (thread, start, end descending)")
        if (r.end < r.start).any():
            problems.append("a range ends before it starts")
        if r.name.min() < 0 or r.name.max() >= n:
            problems.append("a range name does not resolve")
        if r.domain.min() < 0 or r.domain.max() >= len(trace.domains):
            problems.append("a range domain does not resolve")
        if not _push_pop_nested(r):
            problems.append("push/pop ranges overlap without nesting on a thread")
    if len(trace.marks) and (trace.marks.name.min() < 0 or trace.marks.name.max() >= n):
        problems.append("a mark name does not resolve")
    if len(o):
        if (np.diff(o.start) < 0).any():
            problems.append("GPU ops are not sorted by start")
        if (o.end < o.start).any():
            problems.append("a GPU op ends before it starts")
        if o.name.min() < 0 or o.name.max() >= n:
            problems.append("a GPU op name does not resolve")
        named = o.api_name[o.api_name >= 0]
        if len(named) and named.max() >= n:
            problems.append("a launching API call name does not resolve")
    return problems


def _push_pop_nested(r: Ranges) -> bool:
    """Each push/pop range either ends before the next one on its thread starts, or encloses it."""
    pp = np.flatnonzero(r.style == PUSH_POP)
    stack: list[int] = []  # ends of the open ranges on the current thread
    tid = None
    for start, end, t in zip(r.start[pp].tolist(), r.end[pp].tolist(), r.tid[pp].tolist()):
        if t != tid:
            stack, tid = [], t
        while stack and stack[-1] <= start:
            stack.pop()
        if stack and end > stack[-1]:
            return False
        stack.append(end)
    return True
