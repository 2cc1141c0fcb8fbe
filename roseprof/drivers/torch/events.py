"""Kineto events -> numpy columns, one segment of the file at a time (see scan.py).

Each segment is decoded by msgspec into small typed structs that name only the fields roseprof uses: every
other field (call stacks, input shapes, occupancy...) is skipped by the decoder without building an object,
which is what keeps a few-hundred-MB trace in bounded memory. The structs of a segment become numpy columns
and are dropped before the next segment is decoded.

Categories, old and new spellings (Kineto 2021 wrote `Kernel`, `Memcpy`, `Memset`, `Runtime`, `Operator`):
  ranges     user_annotation; in 2021 traces (no user_annotation category) the `Operator` events that are
             scopes rather than operators: names with "#" or "." and no "::" (`ProfilerStep#3`,
             `Optimizer.step#SGD.step`, `my.region`; not `aten::mm`, `detach_`, `AddmmBackward`)
  GPU ops    kernel / Kernel, gpu_memcpy / Memcpy, gpu_memset / Memset
  API calls  cuda_runtime / Runtime, cuda_driver (ROCm traces spell hip* calls in the same categories)
  host       cpu_op / Operator (operators), python_function: kept for the export only (model.HostEvents)
  flows      ac2g / async `s` and `f` events: the launching call's and the GPU op's correlation id

Streams and devices are integers in CUDA traces; ROCm traces (roctracer, rocprofiler-sdk) write a HIP stream as
the pointer's text ("0x7f2c..."): each distinct text becomes one stream id (`Columns.track_id`), as a tid does.
Names longer than model.MAX_NAME_CHARS are cut as they are read.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from roseprof.model import cut_name

RANGE, OP_KERNEL, OP_MEMCPY, OP_MEMSET, API = 0, 1, 2, 3, 4
# Kept for the export only (model.HostEvents): CPU operators, Python frames; driver calls apart from runtime ones.
HOST_CPU_OP, HOST_PYTHON, API_DRIVER = 5, 6, 7
CATEGORY = {
    "user_annotation": RANGE,
    "kernel": OP_KERNEL,
    "Kernel": OP_KERNEL,
    "gpu_memcpy": OP_MEMCPY,
    "Memcpy": OP_MEMCPY,
    "gpu_memset": OP_MEMSET,
    "Memset": OP_MEMSET,
    "cuda_runtime": API,
    "Runtime": API,
    "cuda_driver": API_DRIVER,
    "cpu_op": HOST_CPU_OP,
    "python_function": HOST_PYTHON,
}
API_KINDS = (API, API_DRIVER)
OLD_OPERATOR = "Operator"
ID_LIMIT = (
    1 << 62
)  # a pid, tid, device or stream beyond this (a pointer written as a number) is numbered instead
FLOW_CATEGORIES = ("ac2g", "async")


class Args(msgspec.Struct):
    correlation: int | None = None
    device: int | str | None = None
    stream: int | str | None = None
    name: Any = None  # thread_name / process_name metadata
    # A CPU op's input shapes, where the profiler ran with record_shapes=True (older Kineto: "Input dims").
    input_dims: Any = msgspec.field(default=None, name="Input Dims")
    old_input_dims: Any = msgspec.field(default=None, name="Input dims")


class Event(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: int | str | None = None
    tid: int | str | None = None
    ts: float | None = None
    dur: float | None = None
    id: int | str | None = None
    args: Args | None = None


DECODER = msgspec.json.Decoder(list[Event])


class Columns:
    """What the reader keeps of every event it uses, accumulated over segments as lists of numpy arrays."""

    def __init__(self) -> None:
        self.names: dict[str, int] = {}  # every name once -> its index (names.json order later)
        self.kind: list[np.ndarray] = []
        self.ts: list[np.ndarray] = []
        self.dur: list[np.ndarray] = []
        self.name: list[np.ndarray] = []
        self.pid: list[np.ndarray] = []
        self.tid: list[np.ndarray] = []
        self.corr: list[np.ndarray] = []
        self.device: list[np.ndarray] = []
        self.stream: list[np.ndarray] = []
        self.shape: list[
            np.ndarray
        ] = []  # a CPU op's input shapes as one interned string; -1 where not recorded
        self.flow_start: list[np.ndarray] = []  # [F, 4] (id, pid, tid, ts) of `s` flow events
        self.flow_end: list[np.ndarray] = []  # [F, 4] of `f` flow events (bound to the GPU op they end on)
        self.process_names: dict[int, str] = {}
        self.thread_names: dict[tuple[int, int], str] = {}
        self.string_tids: dict[str, int] = {}  # 2021 traces write tids as strings ("25738", "stream 7")
        self.events = 0  # events decoded so far (error messages count from here)
        # Flow events are kept only on a second pass (read_flows, set by the reader), made when some GPU op found
        # no launching call by correlation id.
        self.want_flows = False
        self.flows = 0
        self.read_flows = None
        self.has_user_annotation = False
        self.old_operators: list[Event] = []  # 2021 `Operator` spans, sorted out at the end

    def intern(self, s: str) -> int:
        s = cut_name(s)
        i = self.names.get(s)
        if i is None:
            i = self.names[s] = len(self.names)
        return i

    def int_id(self, v) -> int:
        """pid/tid as an int: numbers as they are, numeric strings parsed, other strings numbered."""
        if isinstance(v, int) and -ID_LIMIT < v < ID_LIMIT:
            return v
        if v is None:
            return -1
        s = str(v)
        if s.lstrip("-").isdigit() and -ID_LIMIT < int(s) < ID_LIMIT:
            return int(s)
        if s.startswith("stream "):  # 2021 GPU tracks: "stream 7"
            tail = s[7:].strip()
            if tail.isdigit():
                return int(tail)
        return self.string_tids.setdefault(s, (1 << 31) + len(self.string_tids))

    def track_id(self, v) -> int:
        """A GPU op's device or stream as an int (-1: not given): integers as they are, numeric text parsed,
        other text (a ROCm HIP stream's pointer, "0x7f2c...") and integers beyond int64 numbered as tids are."""
        if v is None:
            return -1
        if isinstance(v, int) and 0 <= v < ID_LIMIT:
            return v
        return self.int_id(str(v))


def add_segment(cols: Columns, segment: bytes, label: str, rows: bool = True) -> None:
    """Decode one segment of whole events into `cols` (rows=False: only what a second pass collects)."""
    from roseprof.errors import RoseprofError

    try:
        events = DECODER.decode(b"[" + segment + b"]")
    except msgspec.ValidationError as e:
        raise RoseprofError(f"{label}: {_where(e, cols.events)}") from None
    except msgspec.DecodeError as e:
        raise RoseprofError(f"{label}: is not valid JSON near event {cols.events} ({e})") from None
    except RecursionError:  # msgspec, on arrays or objects nested thousands deep (inside an event's args)
        raise RoseprofError(
            f"{label}: an event near traceEvents[{cols.events}] is nested too deeply to read (damage)"
        ) from None
    base = cols.events
    cols.events += len(events)
    picked: list[tuple[int, Event]] = []
    flow_s: list[Event] = []
    flow_f: list[Event] = []
    for i, e in enumerate(events):
        ph = e.ph
        if ph == "X":
            kind = CATEGORY.get(e.cat)
            old = kind is None and e.cat == OLD_OPERATOR and _scope_name(e.name)
            if kind is None and not old and e.cat != OLD_OPERATOR:
                continue
            if e.ts is None or e.dur is None:
                what = "ts" if e.ts is None else "dur"
                raise RoseprofError(
                    f"{label}: traceEvents[{base + i}] ({e.cat} {e.name[:60]!r}) has no {what!r}: "
                    "not a complete trace event"
                )
            if old:
                cols.old_operators.append(e)
                continue
            if kind is None:  # a 2021 `Operator` that is an operator, not a scope: a CPU op
                kind = HOST_CPU_OP
            picked.append((kind, e))
            cols.has_user_annotation |= kind == RANGE
        elif ph in ("s", "f") and e.cat in FLOW_CATEGORIES and e.ts is not None:
            cols.flows += 1
            if cols.want_flows:
                (flow_s if ph == "s" else flow_f).append(e)
        elif ph == "M" and e.args is not None and isinstance(e.args.name, str):
            pid = cols.int_id(e.pid)
            if e.name == "process_name":
                cols.process_names[pid] = cut_name(e.args.name)
            elif e.name == "thread_name":
                cols.thread_names[(pid, cols.int_id(e.tid))] = cut_name(e.args.name)
    if rows:
        try:
            add_rows(cols, picked)
        except OverflowError:  # a correlation id beyond 64 bits (pids, tids and streams are numbered instead)
            raise RoseprofError(
                f"{label}: an event near traceEvents[{base}] holds a correlation id beyond 64 bits (damage)"
            ) from None
    for out, flows in ((cols.flow_start, flow_s), (cols.flow_end, flow_f)):
        if flows:
            out.append(
                np.array(
                    [(cols.int_id(e.id), cols.int_id(e.pid), cols.int_id(e.tid), e.ts) for e in flows],
                    dtype=np.float64,
                )
            )  # [F, 4] id, pid, tid, ts (ids and ids of threads are exact in float64 below 2**53)


def add_rows(cols: Columns, picked: list[tuple[int, Event]]) -> None:
    if not picked:
        return
    n = len(picked)
    cols.kind.append(np.fromiter((k for k, _ in picked), dtype=np.int8, count=n))
    cols.ts.append(np.fromiter((e.ts for _, e in picked), dtype=np.float64, count=n))
    cols.dur.append(np.fromiter((e.dur for _, e in picked), dtype=np.float64, count=n))
    intern = cols.intern
    none = Args()  # every field None
    args = [none if e.args is None else e.args for _, e in picked]
    # Each event's name, then its input shapes, interned in event order: the names table is the same however the
    # file was cut into segments.
    pairs = np.fromiter(
        (x for (_, e), a in zip(picked, args) for x in (intern(e.name), _shapes(intern, a))), np.int64, 2 * n
    )
    cols.name.append(pairs[0::2].copy())
    int_id = cols.int_id
    cols.pid.append(
        np.fromiter(
            (e.pid if type(e.pid) is int and 0 <= e.pid < ID_LIMIT else int_id(e.pid) for _, e in picked),
            dtype=np.int64,
            count=n,
        )
    )
    cols.tid.append(
        np.fromiter(
            (e.tid if type(e.tid) is int and 0 <= e.tid < ID_LIMIT else int_id(e.tid) for _, e in picked),
            dtype=np.int64,
            count=n,
        )
    )
    cols.corr.append(np.fromiter((-1 if a.correlation is None else a.correlation for a in args), np.int64, n))
    track = cols.track_id
    cols.device.append(np.fromiter((track(a.device) for a in args), np.int64, n))
    cols.stream.append(np.fromiter((track(a.stream) for a in args), np.int64, n))
    cols.shape.append(pairs[1::2].copy())


def _shapes(intern, a: Args) -> int:
    """The input shapes key_averages(group_by_input_shape=True) shows (`[[32, 32], [32, 32]]`), interned; -1 where
    the op recorded none."""
    dims = a.input_dims if a.input_dims is not None else a.old_input_dims
    return -1 if dims is None else intern(str(dims) if isinstance(dims, list) else "?")


def _scope_name(name: str) -> bool:
    return "::" not in name and ("#" in name or "." in name)


def _where(e: msgspec.ValidationError, base: int) -> str:
    """msgspec's `... - at `$[12].ts`` as `traceEvents[base+12].ts: ...`."""
    text = str(e)
    msg, _, at = text.partition(" - at `$[")
    if at:
        idx, _, rest = at.partition("]")
        field = rest.rstrip("`").lstrip(".")
        return f"traceEvents[{base + int(idx)}]{'.' + field if field else ''}: {msg[0].lower() + msg[1:]}"
    return f"an event does not fit the trace format: {text}"


def us_to_ns(us: np.ndarray) -> np.ndarray:
    """Kineto's microseconds (floats, ns in 3 decimals) -> integer ns, rounded to nearest.

    The integer part and the fraction are converted apart, so the fraction's three decimals come back exactly
    whenever the float holds them (|ts| < 2**43 us, true of every trace written relative to
    baseTimeNanoseconds); multiplying the whole value by 1000 first would round twice.
    """
    whole = np.floor(us)
    return whole.astype(np.int64) * 1000 + np.rint((us - whole) * 1000.0).astype(np.int64)
