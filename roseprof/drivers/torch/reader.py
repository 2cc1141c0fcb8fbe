"""Read a torch.profiler (Kineto) / Chrome-trace JSON file (.json, .json.gz, .pt.trace.json[.gz]) into the model.

What becomes what:
- `user_annotation` spans (record_function, ProfilerStep#N) -> ranges, push/pop style, nested by time on their
  thread. A thread is a (pid, tid) pair: its id in the model is pid << 32 | tid, so processes (and ranks
  merged into one file) stay apart. `ProfilerStep#N` is named `ProfilerStep` (one region, N instances), which
  is what the step analysis looks for when there is no step log.
- kernels, memcpys, memsets -> GPU ops with their device and stream, joined to the `cuda_runtime` /
  `cuda_driver` call that launched them by correlation id (args.correlation), or, where an event lacks it, by
  the `ac2g` flow that links the two; so Nsight Systems' projection rule applies to them unchanged.
- `gpu_user_annotation` spans are not kept: Kineto draws each one from the first to the last GPU op launched
  under a user annotation, which is the projection the analysis computes itself (`gpu_proj_ns`; a test checks
  the two agree). Keeping them as ranges too would count every region twice.
- CPU operators (`cpu_op`, aten::*), Python frames and the runtime calls that launched no GPU op are kept
  apart (model.HostEvents): regions are what the program annotated, as with NVTX under Nsight Systems, and
  the export writes them all back.

Timestamps: Kineto writes microseconds as floats with three decimals; they become integer ns by rounding
(`events.us_to_ns`), exactly for traces written relative to baseTimeNanoseconds (PyTorch 2.x). Older traces
hold Unix-epoch microseconds, where a float64 keeps about 0.25 us: the reader says so in the run's warnings.
The clock is Unix time (CLOCK_REALTIME): trace time t is the instant baseTimeNanoseconds + t.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from roseprof.drivers.base import Limits
from roseprof.drivers.demangle import demangle
from roseprof.drivers.torch.events import (
    API_DRIVER,
    API_KINDS,
    HOST_CPU_OP,
    HOST_PYTHON,
    OP_KERNEL,
    OP_MEMCPY,
    OP_MEMSET,
    RANGE,
    Columns,
    add_rows,
    add_segment,
    us_to_ns,
)
from roseprof.drivers.torch.scan import EventStream
from roseprof.errors import RoseprofError
from roseprof.model import (
    HOST_CATEGORIES,
    KERNEL,
    MEMCPY,
    MEMSET,
    PUSH_POP,
    START_END,
    GpuOps,
    HostEvents,
    Names,
    Process,
    Ranges,
    Tool,
    Trace,
)
from roseprof.model_check import check

DISTRIBUTED_INFO = "kineto distributedInfo"  # Process.rank_from where the file's distributedInfo says
PROFILER_STEP = "ProfilerStep"  # ProfilerStep#N spans, one region (the step analysis looks for this name)
EXACT_US_LIMIT = 2.0**43  # below it a float64 keeps three decimals of microseconds exactly
TIME_LIMIT_US = 2.0**62 / 1000  # 2^62 ns: beyond it end = start + dur would overflow int64
# An event longer than this (13 days) is damage, not a profiled span: left out, with a warning (a profiler's trace of
# that long would be terabytes). Kept, one NCCL kernel of 10^15 us made every collective figure beyond any time.
MAX_DUR_US = 2.0**50 / 1000
BASE_LIMIT_NS = 1 << 62  # a baseTimeNanoseconds beyond (year 2116) or below 0 is no Unix time
OP_KIND = {OP_KERNEL: KERNEL, OP_MEMCPY: MEMCPY, OP_MEMSET: MEMSET}


class Header(msgspec.Struct):
    schemaVersion: object = None  # noqa: N815 - Kineto's key
    deviceProperties: list[dict] | None = None  # noqa: N815
    baseTimeNanoseconds: int | None = None  # noqa: N815
    distributedInfo: dict | None = None  # noqa: N815
    torch_version: str | None = None  # written by `roseprof torch` captures (add_metadata)


def thread_id(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """The model's thread id of a (pid, tid) pair: unique per pair for pids < 2**31 and tids < 2**32."""
    return ((pid & 0x7FFFFFFF) << 32) | (tid & 0xFFFFFFFF)


def read_kineto(
    path: Path, raw: Path | None = None, label: str | None = None, limits: Limits | None = None
) -> Trace:
    label = label or str(path)
    stream = EventStream(path, label, limits)
    cols = Columns()
    for segment in stream.segments():
        add_segment(cols, segment, label)
    header = Header()
    if not stream.bare_array:
        try:
            header = msgspec.json.decode(stream.header, type=Header)
        except msgspec.DecodeError as e:
            raise RoseprofError(f"{label}: is not valid JSON outside traceEvents ({e})") from None
        except RecursionError:
            raise RoseprofError(
                f"{label}: is nested too deeply outside traceEvents to read (damage)"
            ) from None
    if cols.events == 0:
        raise RoseprofError(f"{label}: the trace has no events (traceEvents is empty)")
    if not cols.has_user_annotation and cols.old_operators:
        add_rows(cols, [(RANGE, e) for e in cols.old_operators])  # a 2021 trace: annotations were `Operator`s
    elif cols.old_operators:
        add_rows(cols, [(HOST_CPU_OP, e) for e in cols.old_operators])  # scopes beside user annotations
    cols.old_operators = []

    def read_flows() -> None:
        """A second pass for the flow events only, made when some GPU op found no launching call by correlation
        id (rare: correlation ids are the rule)."""
        flows = Columns()
        flows.want_flows, flows.string_tids = True, cols.string_tids
        for segment in EventStream(path, label, limits).segments():
            add_segment(flows, segment, label, rows=False)
        cols.flow_start, cols.flow_end = flows.flow_start, flows.flow_end

    cols.read_flows = read_flows
    if not cols.kind or np.isin(np.concatenate(cols.kind), (HOST_CPU_OP, HOST_PYTHON)).all():
        raise RoseprofError(
            f"{label}: none of its {cols.events} events is a user annotation, kernel, memcpy or memset: "
            "nothing to analyse (record_function spans and CUDA activity are what roseprof reads)"
        )
    return _build(cols, header, label)


def _take(cols: Columns, field: str, dtype=np.int64) -> np.ndarray:
    """One column of every segment as one array. The segments are dropped from `cols` as the array is made: kept
    to the end of `_build`, every column of the file was held twice at the peak (the segments and the array)."""
    parts = getattr(cols, field)
    setattr(cols, field, [])
    return np.concatenate(parts).astype(dtype, copy=False)


def _check_times(us: np.ndarray, what: str, label: str) -> None:
    bad = ~(np.abs(us) < TIME_LIMIT_US)  # NaN too
    if bad.any():  # cast to integer ns it would become an arbitrary time, silently
        raise RoseprofError(
            f"{label}: {int(bad.sum())} event(s) have a {what} of {us[bad][0]:g} us, beyond any time a trace "
            "holds (damage)"
        )


def _durations(dur_us: np.ndarray, warnings: list[str]) -> np.ndarray:
    dur = us_to_ns(dur_us)
    if (dur < 0).any():
        warnings.append(f"{int((dur < 0).sum())} events with a negative duration were read as 0 ns long")
        dur = np.maximum(dur, 0)
    return dur


def _build(cols: Columns, header: Header, label: str) -> Trace:
    kind = _take(cols, "kind", np.int8)
    ts_us = _take(cols, "ts", np.float64)
    dur_us = _take(cols, "dur", np.float64)
    _check_times(ts_us, "ts", label)
    _check_times(dur_us, "dur", label)
    warnings = []
    too_long = dur_us > MAX_DUR_US
    if too_long.any():
        longest = float(dur_us[too_long].max())
        kind = np.where(too_long, np.int8(-1), kind)  # of no kind: neither range, GPU op nor host event
        dur_us = np.where(too_long, 0.0, dur_us)
        warnings.append(
            f"{label}: {int(too_long.sum())} event(s) lasting over {MAX_DUR_US / 86_400e6:.0f} days (up to "
            f"{longest:g} us: damage) were left out"
        )
    start = us_to_ns(ts_us)
    end = start + _durations(dur_us, warnings)
    del dur_us  # nothing below reads it: one column less at the peak
    if len(ts_us) and np.abs(ts_us).max() >= EXACT_US_LIMIT and (ts_us != np.floor(ts_us)).any():
        warnings.append(
            "timestamps are Unix-epoch microseconds with fractions: a float64 keeps them to about 0.25 us "
            "(durations stay exact)"
        )
    name = _take(cols, "name")
    pid, tid = _take(cols, "pid"), _take(cols, "tid")
    corr, device, stream = _take(cols, "corr"), _take(cols, "device"), _take(cols, "stream")
    names = Names(_demangled(list(cols.names), np.unique(name[kind == OP_KERNEL]), warnings))
    thread = thread_id(pid, tid)

    is_range = kind == RANGE
    r_name = name[is_range].copy()
    step_ids = [i for s, i in cols.names.items() if s.startswith(PROFILER_STEP + "#")]
    if step_ids:
        r_name[np.isin(r_name, step_ids)] = names.intern(PROFILER_STEP)
    ranges = Ranges(
        start=start[is_range],
        end=end[is_range],
        name=r_name,
        domain=np.zeros(int(is_range.sum()), dtype=np.int64),
        tid=thread[is_range],
        style=np.full(int(is_range.sum()), PUSH_POP, dtype=np.int64),
    ).sort()
    probe = Trace(tool=Tool("torch", "?"), names=names, ranges=ranges)
    if any("overlap" in p for p in check(probe)):
        # Spans that cross on one thread (e.g. async work annotated by hand): keep them, as start/end ranges.
        ranges.style[:] = START_END
        warnings.append("user annotations overlap without nesting on a thread: read as start/end ranges")

    ops, launched = _gpu_ops(
        cols, kind, start, end, name, pid, tid, ts_us, corr, device, stream, thread, names
    )
    # Everything else on the host, for the export: CPU ops, Python frames, calls that launched no GPU op.
    host = np.isin(kind, (HOST_CPU_OP, HOST_PYTHON, *API_KINDS))
    host[launched] = False
    host_i = np.flatnonzero(host)
    host_i = host_i[np.argsort(start[host_i], kind="stable")]
    host_kind = np.select(
        [kind[host_i] == HOST_CPU_OP, kind[host_i] == HOST_PYTHON, kind[host_i] == API_DRIVER],
        [HOST_CATEGORIES.index("cpu_op"), HOST_CATEGORIES.index("python_function"),
         HOST_CATEGORIES.index("cuda_driver")],
        HOST_CATEGORIES.index("cuda_runtime"),
    )  # fmt: skip
    host_events = HostEvents(
        start[host_i], end[host_i], name[host_i], thread[host_i], host_kind.astype(np.int64),
        shape=_take(cols, "shape")[host_i],
    )  # fmt: skip
    used = np.unique(np.concatenate([ranges.tid, ops.api_tid[ops.api_tid >= 0], host_events.tid]))
    rank, world_size = _distributed(header.distributedInfo, label, warnings)
    threads = {}
    for t in used.tolist():
        p, th = t >> 32, t & 0xFFFFFFFF
        process = cols.process_names.get(p, "process")
        tname = cols.thread_names.get((p, th)) or f"thread {th}"
        threads[t] = f"{tname}, {process} pid {p}" + (f" rank {rank}" if rank is not None else "")
    # One Kineto file is one process' (one rank's) view: every host pid in it gets the file's rank.
    processes = {
        p: Process(
            p, cols.process_names.get(p, ""), rank, world_size, DISTRIBUTED_INFO if rank is not None else None
        )
        for p in np.unique(used >> 32).tolist()
    }
    gpus = [
        {
            "id": d.get("id"),
            "name": d.get("name"),
            "totalMemory": d.get("totalGlobalMem"),
            "smCount": d.get("numSms"),
        }
        for d in header.deviceProperties or []
        if isinstance(d, dict)
    ]
    base = header.baseTimeNanoseconds
    if base is not None and not 0 <= base < BASE_LIMIT_NS:
        raise RoseprofError(
            f"{label}: its baseTimeNanoseconds, {base}, is no Unix time in nanoseconds (damage): its events' times "
            "are unknown"
        )
    epoch_us = len(ts_us) and base is None and np.median(ts_us) > 1e15  # after 2001: Unix-epoch microseconds
    schema = header.schemaVersion
    return Trace(
        tool=Tool("torch", header.torch_version or "?", None if schema is None else f"kineto {schema}"),
        names=names,
        ranges=ranges,
        ops=ops,
        threads=threads,
        gpus=gpus,
        session_start_utc_ns=base if base is not None else (0 if epoch_us else None),
        clock="realtime" if base is not None or epoch_us else None,
        warnings=warnings,
        host_events=host_events,
        thread_pids=dict(zip(used.tolist(), (used >> 32).tolist())),
        processes=processes,
    )


def _demangled(strings: list[str], kernel_ids: np.ndarray, warnings: list[str]) -> list[str]:
    """The trace's strings, with the kernels' names Kineto left mangled demangled (drivers/demangle.py: a CUTLASS
    GEMM's is too deep for the demangler Kineto calls)."""
    ids = kernel_ids.tolist()
    readable, warning = demangle([strings[i] for i in ids])
    if warning:
        warnings.append(warning)
    for i, text in zip(ids, readable):
        strings[i] = text
    return strings


def _distributed(info: dict | None, label: str, warnings: list[str]) -> tuple[int | None, int | None]:
    """(rank, world size) from Kineto's distributedInfo, where it holds them as non-negative integers. A world size
    of 0 is no world (read as unknown, with a warning); a rank outside its world size is refused: which of the two
    numbers is wrong is unknown, and either makes the run's ranks wrong."""
    out = []
    for key in ("rank", "world_size"):
        v = (info or {}).get(key)
        out.append(v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 1 << 31 else None)
    rank, world = out
    if world == 0:
        warnings.append(f"{label}: its distributedInfo says world size 0, which is no world: read as unknown")
        world = None
    if rank is not None and world is not None and rank >= world:
        raise RoseprofError(
            f"{label}: its distributedInfo says rank {rank} of a world size of {world}: no such rank "
            f"(ranks 0 to {world - 1})"
        )
    return rank, world


def _gpu_ops(cols, kind, start, end, name, pid, tid, ts_us, corr, device, stream, thread, names):
    """(the GPU ops, the rows of the calls that launched any)."""
    is_op = np.isin(kind, list(OP_KIND))
    op_i = np.flatnonzero(is_op)
    order = op_i[np.argsort(start[op_i], kind="stable")]
    n = len(order)
    api = np.flatnonzero(np.isin(kind, API_KINDS))
    api_row = _join_by_correlation(corr[order], corr[api], start[order], start[api])
    api_row = np.where(api_row >= 0, api[np.maximum(api_row, 0)], -1)
    missing = api_row < 0
    if missing.any() and cols.flows and not cols.flow_start and cols.read_flows is not None:
        cols.read_flows()
    if missing.any() and cols.flow_start and cols.flow_end:
        api_row[missing] = _join_by_flow(cols, order[missing], api, pid, tid, ts_us)
    hit = api_row >= 0
    src = api_row[hit]
    api_start = np.full(n, -1, dtype=np.int64)
    api_end, api_tid, api_name = api_start.copy(), api_start.copy(), api_start.copy()
    api_start[hit], api_end[hit], api_tid[hit], api_name[hit] = start[src], end[src], thread[src], name[src]
    op_kind = np.zeros(n, dtype=np.int64)
    for k, v in OP_KIND.items():
        op_kind[kind[order] == k] = v
    dev, strm = device[order], stream[order]
    return GpuOps(
        kind=op_kind,
        start=start[order],
        end=end[order],
        name=name[order],
        device=np.where(dev >= 0, dev, pid[order]),  # Kineto's GPU track: pid = device, tid = stream
        stream=np.where(strm >= 0, strm, tid[order]),
        graph_node=np.full(n, -1, dtype=np.int64),
        api_start=api_start,
        api_end=api_end,
        api_tid=api_tid,
        api_name=api_name,
    ), np.unique(src)


def _join_by_correlation(op_corr, api_corr, op_start, api_start) -> np.ndarray:
    """For each op, the index (into the API arrays) of the call with its correlation id, or -1.

    Correlation ids are unique per process; where a file holds several processes and one id repeats, the op
    takes the latest call with that id that began before it.
    """
    out = np.full(len(op_corr), -1, dtype=np.int64)
    if len(api_corr) == 0 or len(op_corr) == 0:
        return out
    order = np.lexsort((api_start, api_corr))
    keys, starts = api_corr[order], api_start[order]
    pos = np.searchsorted(keys, op_corr, side="right") - 1
    for _ in range(8):  # step back over calls with the same id that began after the op
        later = (pos > 0) & (keys[np.maximum(pos, 0)] == op_corr) & (starts[np.maximum(pos, 0)] > op_start)
        later &= keys[np.maximum(pos - 1, 0)] == op_corr
        if not later.any():
            break
        pos[later] -= 1
    ok = (pos >= 0) & (op_corr >= 0) & (keys[np.maximum(pos, 0)] == op_corr)
    out[ok] = order[pos[ok]]
    return out


def _join_by_flow(cols, op_rows, api, pid, tid, ts_us) -> np.ndarray:
    """Ops without a correlation id: the `f` flow event on the op's track at its start names the id, and the
    `s` event with that id sits on the launching call's track at the call's start."""
    fs, ff = np.concatenate(cols.flow_start), np.concatenate(cols.flow_end)
    call_at = {
        (p, t, s): i
        for i, p, t, s in zip(api.tolist(), pid[api].tolist(), tid[api].tolist(), ts_us[api].tolist())
    }
    start_of = {int(i): (int(p), int(t), s) for i, p, t, s in fs.tolist()}
    id_at = {(int(p), int(t), s): int(i) for i, p, t, s in ff.tolist()}
    out = np.full(len(op_rows), -1, dtype=np.int64)
    for j, row in enumerate(op_rows.tolist()):
        flow = id_at.get((int(pid[row]), int(tid[row]), float(ts_us[row])))
        at = start_of.get(flow) if flow is not None else None
        out[j] = call_at.get(at, -1) if at is not None else -1
    return out
