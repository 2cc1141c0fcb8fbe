"""A stored run -> Chrome trace-event JSON, the format ui.perfetto.dev and chrome://tracing import.

Written as a stream, a batch of rows at a time, from the columns of the run's trace (its view's tables: this module
never reads a run folder), so a run with a million kernels never becomes a million Python dicts. What Perfetto's JSON importer needs, and what we write:
- a top-level object with "traceEvents" (and "displayTimeUnit");
- timestamps ("ts") and durations ("dur") in microseconds: integer ns printed as `us.nnn`, exact;
- integer "pid" and "tid"; "M" events (process_name, thread_name) naming the tracks;
- "X" complete events for slices (sync slices must nest on a track: push/pop ranges do), "i" instants with a
  scope ("s"), "C" counters with numeric args, "s"/"f" flow events (same "id", "bp": "e") for launch arrows.

Tracks: one per CPU thread (regions as `user_annotation` slices, launching calls as `cuda_runtime`
slices), grouped by process, a process of a known rank named "rank R (pid P)" (a run of several ranks is one
process per rank, as HTA and Perfetto users expect); one per GPU stream (a GPU whose ops one rank launched named
"GPU d (rank R)") (kernels, memcpys, memsets with their Kineto categories and args.correlation), a
"roseprof" process with the decode steps and, apart, the rollover steps (slices and instant markers), and GPU
telemetry counters where the capture sampled any. Categories and args follow Kineto's, so roseprof's own
Kineto reader imports the file back with the same region and kernel totals.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from roseprof.drivers import split_thread_id
from roseprof.export import text_output
from roseprof.model import (
    HOST_CATEGORIES,
    KERNEL,
    MEMCPY,
    START_END,
    Trace,
    gpu_track_parts,
    is_gpu_track,
    spelled_range_names,
)
from roseprof.render.view import RunView

BATCH = 65536
STYLE_ARGS = ', "args": {"style": "start/end"}'
STEPS_PID = 2**31 - 2  # the "roseprof" process holding the step tracks
OP_CATEGORY = {KERNEL: "kernel", MEMCPY: "gpu_memcpy"}  # anything else: gpu_memset
GPU_TRACK_TID = 1 << 30  # a GPU track's tid in its device's process: above every stream's


def _us(ns: int) -> str:
    """Integer ns as microseconds with three decimals, exact (a float would round large timestamps)."""
    sign = "-" if ns < 0 else ""
    ns = abs(ns)
    return f"{sign}{ns // 1000}.{ns % 1000:03d}"


def cpu_pid_tid(tool: str, tid: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (pid, tid) a thread id of the model stands for: how the tool packs them is its driver's to say; a GPU
    track's (a kernel's regions: model.gpu_track) is its device's process, a track beside its stream's."""
    tid = np.asarray(tid, dtype=np.int64)
    pid, out = split_thread_id(tool, tid)
    on_gpu = is_gpu_track(tid)
    if on_gpu.any():
        pid, out = np.array(pid, dtype=np.int64), np.array(out, dtype=np.int64)
        device, stream, lane = gpu_track_parts(tid[on_gpu])
        pid[on_gpu], out[on_gpu] = device, GPU_TRACK_TID + stream * 256 + np.minimum(lane, 255)
    return pid, out


class _Writer:
    def __init__(self, fh) -> None:
        self.fh = fh
        self.first = True

    def lines(self, lines: list[str]) -> None:
        if not lines:
            return
        self.fh.write(("\n" if self.first else ",\n") + ",\n".join(lines))
        self.first = False


class ChromeExport:
    """A run as Chrome trace JSON (Perfetto), from its view alone: the trace, the GPU ops' launching regions, the
    steps, the telemetry and the step log are the view's tables (roseprof.api.run_view)."""

    def render(self, view: RunView, out_path: Path) -> Path:
        write_chrome(view, out_path)
        return out_path


def write_chrome(view: RunView, out: Path) -> None:
    steps, telemetry, manifest = view.steps, view.telemetry, view.run.manifest
    tables = view.tables
    trace = tables.trace()
    with text_output(out, level=3) as fh:
        meta = {
            "tool": trace.tool.name,
            "version": trace.tool.version,
            "run_id": (manifest or {}).get("run_id"),
        }
        fh.write('{"displayTimeUnit": "ns", "otherData": ' + json.dumps(meta) + ', "traceEvents": [')
        w = _Writer(fh)
        spelled = spelled_range_names(trace)  # NCCL's `ncclAllReduce` range as every table names it
        # Every name escaped once, the spelled ones included.
        esc = [json.dumps(s) for s in trace.names.values]
        _tracks(w, trace)
        _ranges(w, trace, esc, spelled)
        _host(w, trace, esc)
        _ops(w, trace, esc, tables.op_regions(len(trace.ops), len(trace.names)))
        _steps(w, steps)
        _telemetry(w, telemetry, steps, tables.step_log)
        fh.write("\n]}\n")


def _tracks(w: _Writer, trace: Trace) -> None:
    tids = np.unique(
        np.concatenate([trace.ranges.tid, trace.ops.api_tid[trace.ops.api_tid >= 0], trace.host_events.tid])
    )
    pid, tid = cpu_pid_tid(trace.tool.name, tids)
    lines = []
    for p in np.unique(pid[~is_gpu_track(tids)]).tolist():  # a GPU track's process is its device's, below
        name = json.dumps(process_label(trace, p))
        lines.append(
            f'{{"ph": "M", "name": "process_name", "pid": {p}, "tid": 0, "args": {{"name": {name}}}}}'
        )
    for t, p, th in zip(tids.tolist(), pid.tolist(), tid.tolist()):
        name = json.dumps(trace.threads.get(t, f"thread {th}"))
        lines.append(
            f'{{"ph": "M", "name": "thread_name", "pid": {p}, "tid": {th}, "args": {{"name": {name}}}}}'
        )
    o = trace.ops
    if len(o):
        ranks = gpu_ranks(trace)
        for d in np.unique(o.device).tolist():  # every GPU track's device has ops: they are its launches
            name = f"GPU {d}" + (f" (rank {ranks[d]})" if d in ranks else "")
            lines.append(
                f'{{"ph": "M", "name": "process_name", "pid": {d}, "tid": 0, "args": {{"name": "{name}"}}}}'
            )
        for d, s in {(int(d), int(s)) for d, s in zip(o.device.tolist(), o.stream.tolist())}:
            lines.append(
                f'{{"ph": "M", "name": "thread_name", "pid": {d}, "tid": {s}, "args": {{"name": "stream {s}"}}}}'
            )
    lines.append(
        f'{{"ph": "M", "name": "process_name", "pid": {STEPS_PID}, "tid": 0, "args": {{"name": "roseprof"}}}}'
    )
    for th, name in ((1, "decode steps"), (2, "rollover steps")):
        lines.append(
            f'{{"ph": "M", "name": "thread_name", "pid": {STEPS_PID}, "tid": {th}, "args": {{"name": "{name}"}}}}'
        )
    w.lines(lines)


def process_label(trace: Trace, pid: int) -> str:
    """A process track's name: "rank R (pid P)" where the run knows the process' rank (one track per rank of a
    multi-rank run), "process P" otherwise."""
    proc = trace.processes.get(pid)
    if proc is not None and proc.rank is not None:
        return f"rank {proc.rank} (pid {pid})"
    return f"process {pid}"


def gpu_ranks(trace: Trace) -> dict[int, int]:
    """{device: rank} for each GPU whose ops were all launched by one rank's process (one GPU a rank)."""
    o = trace.ops
    launched = o.api_tid >= 0
    ranks = trace.ranks(trace.pids(o.api_tid[launched]))
    out = {}
    for d in np.unique(o.device[launched]).tolist():
        on_d = np.unique(ranks[o.device[launched] == d])
        if len(on_d) == 1 and on_d[0] >= 0:
            out[d] = int(on_d[0])
    return out


def _ranges(w: _Writer, trace: Trace, esc: list[str], spelled: np.ndarray | None) -> None:
    """The regions as slices, each named as every table spells it (`spelled`: [R] names index; None: its name)."""
    r = trace.ranges if spelled is None else replace(trace.ranges, name=spelled)
    _spans(
        w, trace, r, esc,
        lambda sl: ['"user_annotation"'] * len(r.start[sl]),
        lambda sl: [STYLE_ARGS if st == START_END else "" for st in r.style[sl].tolist()],
    )  # fmt: skip


def _host(w: _Writer, trace: Trace, esc: list[str]) -> None:
    """The host events that are not regions (torch: CPU operators, Python frames, calls that launched nothing),
    on their threads with their Kineto categories."""
    h = trace.host_events
    cats = [json.dumps(c) for c in HOST_CATEGORIES]
    _spans(
        w,
        trace,
        h,
        esc,
        lambda sl: [cats[k] for k in h.kind[sl].tolist()],
        lambda sl: [""] * len(h.start[sl]),
    )


def _spans(w: _Writer, trace: Trace, table, esc: list[str], cats, extra) -> None:
    """Complete ("X") events of a host table (start, end, name, tid columns) on their process and thread, a batch
    at a time: `cats(slice)` gives each row's category (JSON text), `extra(slice)` what follows its duration (args,
    or nothing)."""
    for lo in range(0, len(table), BATCH):
        sl = slice(lo, lo + BATCH)
        pid, tid = cpu_pid_tid(trace.tool.name, table.tid[sl])
        w.lines(
            [
                f'{{"ph": "X", "cat": {c}, "name": {esc[n]}, "pid": {p}, "tid": {t}, "ts": {_us(s)}, '
                f'"dur": {_us(e - s)}{x}}}'
                for s, e, n, p, t, c, x in zip(
                    table.start[sl].tolist(), table.end[sl].tolist(), table.name[sl].tolist(), pid.tolist(),
                    tid.tolist(), cats(sl), extra(sl),
                )
            ]
        )  # fmt: skip


def _ops(w: _Writer, trace: Trace, esc: list[str], regions: dict | None) -> None:
    """GPU ops on their stream tracks and, once each, the calls that launched them, linked by a flow. An op's args
    name its region (innermost, launching) and, for a kernel a CUDA graph replayed, the region it was captured
    in: the region roseprof's views count it in."""
    o = trace.ops
    none = np.full(len(o), -1, dtype=np.int64)
    launch_region = regions["region"] if regions else none
    capture_region = regions["capture_region"] if regions else none
    if not len(o):
        return
    launched = o.api_tid >= 0
    # One correlation id per distinct launching call (a graph launch starts many kernels).
    key = np.stack([o.api_tid, o.api_start, o.api_end], axis=1)[launched]
    calls, first, call_of = np.unique(key, axis=0, return_index=True, return_inverse=True)
    corr = np.full(len(o), -1, dtype=np.int64)
    corr[launched] = call_of.reshape(-1) + 1
    api_rows = np.flatnonzero(launched)[first]
    cpid, ctid = cpu_pid_tid(trace.tool.name, o.api_tid[api_rows])
    for lo in range(0, len(api_rows), BATCH):
        sl = slice(lo, lo + BATCH)
        rows = api_rows[sl]
        w.lines(
            [
                line
                for c, s, e, n, p, t in zip(
                    corr[rows].tolist(), o.api_start[rows].tolist(), o.api_end[rows].tolist(),
                    o.api_name[rows].tolist(), cpid[sl].tolist(), ctid[sl].tolist(),
                )
                for line in (
                    f'{{"ph": "X", "cat": "cuda_runtime", "name": {esc[n] if n >= 0 else json.dumps("launch")}, '
                    f'"pid": {p}, "tid": {t}, "ts": {_us(s)}, "dur": {_us(e - s)}, "args": {{"correlation": {c}}}}}',
                    f'{{"ph": "s", "cat": "ac2g", "name": "ac2g", "id": {c}, "pid": {p}, "tid": {t}, "ts": {_us(s)}}}',
                )
            ]
        )  # fmt: skip
    for lo in range(0, len(o), BATCH):
        sl = slice(lo, lo + BATCH)
        lines = []
        for k, s, e, n, d, st, c, lr, cr in zip(
            o.kind[sl].tolist(), o.start[sl].tolist(), o.end[sl].tolist(), o.name[sl].tolist(),
            o.device[sl].tolist(), o.stream[sl].tolist(), corr[sl].tolist(), launch_region[sl].tolist(),
            capture_region[sl].tolist(),
        ):  # fmt: skip
            cat = OP_CATEGORY.get(k, "gpu_memset")
            args = f'"device": {d}, "stream": {st}' + (f', "correlation": {c}' if c > 0 else "")
            if lr >= 0:
                args += f', "region": {esc[lr]}'
            if cr >= 0:
                args += f', "capture_region": {esc[cr]}'
            lines.append(
                f'{{"ph": "X", "cat": "{cat}", "name": {esc[n]}, "pid": {d}, "tid": {st}, "ts": {_us(s)}, '
                f'"dur": {_us(e - s)}, "args": {{{args}}}}}'
            )
            if c > 0:
                lines.append(
                    f'{{"ph": "f", "cat": "ac2g", "name": "ac2g", "id": {c}, "pid": {d}, "tid": {st}, '
                    f'"ts": {_us(s)}, "bp": "e"}}'
                )
        w.lines(lines)


def _steps(w: _Writer, steps: dict | None) -> None:
    rows = (steps or {}).get("rows")
    if not rows:
        return
    lines = []
    for k, (i, s, d, r) in enumerate(zip(rows["index"], rows["start_ns"], rows["dur_ns"], rows["rollovers"])):
        args = f'{{"index": {i}, "rollovers": {r}' + (
            f', "batch_size": {rows["batch_size"][k]}}}' if "batch_size" in rows else "}"
        )
        lines.append(
            f'{{"ph": "X", "cat": "roseprof.step", "name": "step {i}", "pid": {STEPS_PID}, "tid": 1, '
            f'"ts": {_us(s)}, "dur": {_us(d)}, "args": {args}}}'
        )
        if r > 0:
            lines.append(
                f'{{"ph": "X", "cat": "roseprof.step", "name": "rollover step {i}", "pid": {STEPS_PID}, "tid": 2, '
                f'"ts": {_us(s)}, "dur": {_us(d)}, "args": {args}}}'
            )
            lines.append(
                f'{{"ph": "i", "cat": "roseprof.step", "name": "rollover", "s": "p", "pid": {STEPS_PID}, '
                f'"tid": 2, "ts": {_us(s)}}}'
            )
    w.lines(lines)


def _telemetry(w: _Writer, telemetry: dict | None, steps: dict | None, step_log) -> None:
    """GPU counters. Samples are on the step log's clock (monotonic): placed on the trace's timeline through
    the first step, which both the trace and the step log hold; left out when the run cannot align them."""
    samples = (telemetry or {}).get("samples") or []
    rows = (steps or {}).get("rows") or {}
    log = step_log() if samples and rows else None  # the engine's step log, read only where it is needed
    if not samples or not rows or log is None or not log.steps:
        return
    k = rows.get("log_index", rows["index"])[0]
    if not 0 <= k < len(log.steps):
        return
    offset = rows["start_ns"][0] - log.steps[k]["start_ns"]
    fields = ("sm_clock_mhz", "util_pct", "mem_used_mib", "power_w")
    w.lines(
        [
            f'{{"ph": "C", "name": "GPU {s["gpu"]} {f}", "pid": {s["gpu"]}, "tid": 0, '
            f'"ts": {_us(s["t_ns"] + offset)}, "args": {{"value": {float(s[f])}}}}}'
            for s in samples
            for f in fields
            if f in s
        ]
    )
