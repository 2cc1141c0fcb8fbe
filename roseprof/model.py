"""The normalised trace every driver returns, whatever tool wrote the file.

Columns are numpy arrays (one row per event) so a million kernels cost a few arrays, not a million objects.
Every string (range, mark and kernel names, launching API calls) is interned once in one `Names` table and
referred to by index; thread names and domains are small lookups beside it. Times are nanoseconds on the
trace's own clock; an unknown integer is -1.

Invariants (checked by `check`, and by the driver contract test on every fixture):
- ranges are sorted by (thread, start, end descending): parents before children, each thread contiguous;
- push/pop ranges are well nested on their thread (start/end ranges may overlap anything);
- every name index resolves in `names`, every domain index in `domains`;
- end >= start for ranges and GPU ops; GPU ops sorted by start;
- per-launch metrics (ncu), where present, have one row per GPU op they describe, each op index valid.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import numpy as np

# GPU op kinds (GpuOps.kind)
KERNEL, MEMCPY, MEMSET = 0, 1, 2
# Range styles (Ranges.style): pushed/popped on one thread, or started/ended anywhere
PUSH_POP, START_END = 0, 1


def _empty(dtype=np.int64) -> np.ndarray:
    return np.zeros(0, dtype=dtype)


# A name longer than this is cut, with a note of how much: an 8 MB kernel name (damage, or a generated name) must
# not cost minutes and gigabytes in every table, chart and terminal line that shows it. Real names (templated
# C++ kernels) stay under a few thousand characters.
MAX_NAME_CHARS = 16384


def cut_name(value: str) -> str:
    if len(value) > MAX_NAME_CHARS:
        return f"{value[:MAX_NAME_CHARS]}…[{len(value) - MAX_NAME_CHARS} more characters]"
    return value


_CUT = re.compile(r"…\[\d+ more characters\]$")


def uncut(value: str) -> tuple[str, bool]:
    """(what cut_name kept of a name, whether it cut it)."""
    m = _CUT.search(value) if len(value) > MAX_NAME_CHARS else None
    return (value[: m.start()], True) if m else (value, False)


class Names:
    """Strings interned once: every *_name column of a trace indexes this one list (each at most
    MAX_NAME_CHARS long: longer ones are cut as they come in)."""

    def __init__(self, values: list[str] | None = None) -> None:
        self.values: list[str] = []
        self._index: dict[str, int] = {}
        for v in values or []:
            self.values.append(cut_name(v))
            self._index.setdefault(self.values[-1], len(self.values) - 1)

    def intern(self, value: str | None) -> int:
        value = "" if value is None else cut_name(value)
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


# Per-launch metric names (KernelMetrics.values), each in the unit its name ends with; NaN where the report
# lacks the metric (never 0). FLOP rates and peaks follow Nsight Compute's own roofline sections.
KERNEL_METRICS = (
    "duration_ns",  # gpu__time_duration.sum
    "elapsed_cycles",  # gpc__cycles_elapsed.max
    "sm_throughput_pct",  # compute (SM) throughput, % of peak (speed of light)
    "memory_throughput_pct",  # memory throughput, % of peak (speed of light)
    "dram_throughput_pct",  # DRAM throughput, % of peak
    "achieved_occupancy_pct",
    "theoretical_occupancy_pct",
    "registers_per_thread",
    "waves_per_sm",
    "dram_read_bytes",
    "dram_write_bytes",
    "dram_bytes_per_s",  # achieved DRAM bandwidth
    "fp32_flop_per_s",  # achieved: fadd + fmul + 2 ffma per cycle x SM frequency
    "fp16_flop_per_s",  # 2 hadd + 2 hmul + 4 hfma (packed half2), per cycle x SM frequency
    "fp64_flop_per_s",
    "tensor_flop_per_s",  # tensor pipe instructions x 512, where the report has them
    "tensor_pipe_pct",  # tensor pipe cycles active, % of peak
    "sm_frequency_hz",
    "dram_frequency_hz",
)


@dataclass
class KernelMetrics:
    """Per-launch metrics (ncu): one row per profiled kernel launch [K], describing GPU op `op[k]`.

    Nsight Compute replays each kernel alone, so these launches have no timeline: the ops they describe carry
    synthetic start times (the launches end to end in launch order), real durations and no launching call.
    """

    op: np.ndarray = field(default_factory=_empty)  # [K] row in Trace.ops
    launch_id: np.ndarray = field(default_factory=_empty)  # [K] the tool's own launch id (ncu: ID)
    grid: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), dtype=np.int64))  # [K, 3], -1 unknown
    block: np.ndarray = field(default_factory=lambda: np.zeros((0, 3), dtype=np.int64))  # [K, 3]
    values: dict[str, np.ndarray] = field(default_factory=dict)  # KERNEL_METRICS name -> [K] float64
    nvtx: list[list[list[str]]] = field(default_factory=list)  # [K] enclosing push/pop ranges, outermost
    # first, each [domain, name] (domain "" for the default domain)
    rules: list[dict] = field(default_factory=list)  # the tool's findings: {launch: k, section, rule, type,
    # description, speedup_type, speedup_pct (None where it gave none)}
    devices: dict[int, dict] = field(default_factory=dict)  # device id -> what the report says of the GPU

    def __len__(self) -> int:
        return len(self.op)

    def value(self, name: str) -> np.ndarray:
        """[K] values of one metric, all NaN where the report has none of it."""
        v = self.values.get(name)
        return v if v is not None else np.full(len(self.op), np.nan)


@dataclass
class GraphNodes:
    """CUDA graph nodes as the tool saw them made [N]: during stream capture (or an explicit add) on the thread
    that made them, or cloned from another node when a graph was instantiated (original >= 0). A replayed
    kernel's GpuOps.graph_node names one of these; following clones back to the original node gives the time
    and thread of its capture, and so the ranges that were open then."""

    node: np.ndarray = field(default_factory=_empty)
    original: np.ndarray = field(default_factory=_empty)  # the node this one was cloned from, or -1
    start: np.ndarray = field(default_factory=_empty)  # when the node was made
    tid: np.ndarray = field(default_factory=_empty)  # the thread that made it

    COLUMNS = ("node", "original", "start", "tid")

    def __len__(self) -> int:
        return len(self.node)


HOST_CATEGORIES = ("cpu_op", "python_function", "cuda_runtime", "cuda_driver")  # HostEvents.kind -> category


@dataclass
class HostEvents:
    """What else the tool recorded on the host [H], beside regions and the calls that launched GPU ops:
    torch.profiler's CPU operators (aten::*), Python frames, and runtime/driver calls that launched nothing
    (synchronisations, allocations). The analyses leave them out (regions are what the program annotated);
    the export keeps them, so a Perfetto view of a run has every event of the raw trace."""

    start: np.ndarray = field(default_factory=_empty)
    end: np.ndarray = field(default_factory=_empty)
    name: np.ndarray = field(default_factory=_empty)  # index into Trace.names
    tid: np.ndarray = field(default_factory=_empty)  # the tool's thread id, as Ranges.tid
    kind: np.ndarray = field(default_factory=_empty)  # index into HOST_CATEGORIES
    # A CPU op's input shapes (index into Trace.names, -1 where not recorded), where the reader has them (torch
    # with record_shapes): for the analysis at capture or import (the operators section), not kept in the run
    # folder (the section's summary part is), so empty for a run read back, and it is no part of COLUMNS.
    shape: np.ndarray = field(default_factory=_empty)

    COLUMNS = ("start", "end", "name", "tid", "kind")

    def shapes(self) -> np.ndarray:
        """[H] each event's input shapes, -1 where not recorded (all, where the reader kept none)."""
        return self.shape if len(self.shape) == len(self) else np.full(len(self), -1, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.start)


@dataclass
class Tool:
    name: str  # "nsys", "torch", "ncu"
    version: str  # the tool's version as its file states it, or "?"
    format: str | None = None  # the file format's own version (nsys: the export schema)


@dataclass
class Process:
    """One OS process of the trace and, where the trace says, its place in a distributed run."""

    pid: int
    name: str = ""  # the process' name as the tool recorded it, or ""
    rank: int | None = None  # its rank (torch.distributed's RANK), where known
    world_size: int | None = None
    rank_from: str | None = (
        None  # what said so: "step log", "kineto distributedInfo", "RANK environment", ...
    )


@dataclass
class Trace:
    tool: Tool
    names: Names = field(default_factory=Names)
    domains: list[str] = field(default_factory=lambda: [""])
    ranges: Ranges = field(default_factory=Ranges)
    marks: Marks = field(default_factory=Marks)
    ops: GpuOps = field(default_factory=GpuOps)
    graph_nodes: GraphNodes = field(default_factory=GraphNodes)
    threads: dict[int, str] = field(default_factory=dict)  # tid -> the thread's name, where the tool knows it
    gpus: list[dict] = field(default_factory=list)
    session_start_utc_ns: int | None = None  # the Unix time (ns) of the trace's time 0, where known
    # The clock of the timestamps where the tool documents it: "realtime" (Unix time; torch.profiler), or None.
    clock: str | None = None
    warnings: list[str] = field(default_factory=list)  # what the reader had to assume or leave out
    kernel_metrics: KernelMetrics | None = None  # per-launch metrics (ncu)
    host_events: HostEvents = field(default_factory=HostEvents)
    # The OS process of every thread id the trace uses (ranges, marks, launching calls, host events), as the
    # tool packed it (nsys: globalTid bits 24..47; torch: pid << 32 | tid); empty where the tool records no
    # process (ncu). `processes` describes each pid; a run of several ranks has one Process per rank.
    thread_pids: dict[int, int] = field(default_factory=dict)
    processes: dict[int, Process] = field(default_factory=dict)

    @property
    def has_gpu(self) -> bool:
        return len(self.ops) > 0

    def pids(self, tids: np.ndarray) -> np.ndarray:
        """[N] the pid of each thread id (-1 where the trace does not say: an unknown thread, a GPU op with no
        launching call)."""
        return lookup(self.thread_pids, tids)

    def ranks(self, pids: np.ndarray) -> np.ndarray:
        """[N] the rank of each pid (-1 where unknown)."""
        return lookup({p: pr.rank for p, pr in self.processes.items() if pr.rank is not None}, pids)

    def used_thread_ids(self) -> np.ndarray:
        """[T] every thread id the trace's events name (ranges, marks, launching calls, graph nodes, host
        events), each once, sorted: what `thread_pids` must cover."""
        parts = [
            self.ranges.tid,
            self.marks.tid,
            self.ops.api_tid[self.ops.api_tid >= 0],
            self.graph_nodes.tid,
            self.host_events.tid,
        ]
        return np.unique(np.concatenate([np.asarray(p, dtype=np.int64) for p in parts]))


# GPU ranges: a range whose thread id is a GPU track lies on the GPU's timeline, not a CPU thread's (issue 50: the
# sub-ranges of one kernel launch, read from the stamps its blocks wrote: workload/kernel_stamps.py). The id packs the
# device, the stream and a lane (overlapping launches of one stream, programmatic dependent launches, go on separate
# lanes so a track's ranges never overlap) above every id a tool packs (torch: pid << 32 | tid; nsys: globalTid).
# Everything else about them is a range's: a name, a domain, a process (`thread_pids`: the launching process), a
# thread name (`threads`), so every table, diff and view sees them as regions; their time is GPU time.
GPU_TRACK = 1 << 62


def gpu_track(device: int, stream: int, lane: int = 0) -> int:
    """The thread id of GPU ranges on (device, stream), lane `lane` (each below 2^16, 2^30 and 2^14)."""
    return GPU_TRACK | (device & 0xFFFF) << 44 | (stream & 0x3FFFFFFF) << 14 | (lane & 0x3FFF)


def is_gpu_track(tid: np.ndarray) -> np.ndarray:
    """[N] whether each thread id is a GPU track."""
    tid = np.asarray(tid, dtype=np.int64)
    return (tid & GPU_TRACK) != 0


def gpu_track_parts(tid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """([N] device, [N] stream, [N] lane) of GPU track ids."""
    tid = np.asarray(tid, dtype=np.int64)
    return (tid >> 44) & 0xFFFF, (tid >> 14) & 0x3FFFFFFF, tid & 0x3FFF


def spelled_region(name: str, domain: str | None) -> str:
    """A region as every table spells it: `domain:name` outside the default NVTX domain (NCCL's own `ncclAllReduce`
    range is `NCCL:ncclAllReduce`, as `nsys stats` 2025 writes it), its name alone in the default domain."""
    return f"{domain}:{name}" if domain else name


def spelled_range_names(trace: Trace) -> np.ndarray | None:
    """[R] each range's name as every table spells a region (`spelled_region`); None where every range is of the
    default domain (`ranges.name` is the spelling).

    The spelled names are interned into the trace's one Names table (new strings at its end: every index in use
    keeps its string), so tables that name a region by index resolve against the trace as stored."""
    r = trace.ranges
    other = np.flatnonzero(np.isin(r.domain, [i for i, d in enumerate(trace.domains) if d]))
    if not len(other):
        return None
    pairs, inverse = np.unique(
        np.stack([r.domain[other], r.name[other]], axis=1), axis=0, return_inverse=True
    )
    ids = [trace.names.intern(spelled_region(trace.names[n], trace.domains[d])) for d, n in pairs.tolist()]
    out = r.name.copy()
    out[other] = np.asarray(ids, dtype=np.int64)[inverse.ravel()]
    return out


def lookup(table: dict[int, int], keys: np.ndarray) -> np.ndarray:
    """[N] table[key] for each key, -1 where the table has none (vectorised: ops and ranges run to millions)."""
    keys = np.asarray(keys, dtype=np.int64)
    if not table or not len(keys):
        return np.full(len(keys), -1, dtype=np.int64)
    k = np.fromiter(table.keys(), dtype=np.int64, count=len(table))
    v = np.fromiter(table.values(), dtype=np.int64, count=len(table))
    order = np.argsort(k)
    k, v = k[order], v[order]
    at = np.clip(np.searchsorted(k, keys), 0, len(k) - 1)
    return np.where(k[at] == keys, v[at], -1)
