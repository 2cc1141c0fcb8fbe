"""The steady state: host and GPU time per step and per region, the way an engineer tuning decode reads a run.

Sums over a whole run are led by what happens once: CUDA-graph capture (every layer's region runs, Triton
compiles, cuBLAS picks kernels), warm-up and prefill. So this view takes the run's steps (the engine's decode
steps; a program's `ProfilerStep#N` or the NVTX range named with --step-range) and leaves out:

    capture   steps in which CUDA graph nodes were made (and, apart from the steps, the ranges that made them)
    warm-up   the benchmark's warm-up runs (step log `run_start` records); in a program that replays CUDA
              graphs, the steps before the first replay (the eager warm-up a capture needs); otherwise, when
              nothing above says what is warm-up, the first step (lazy initialisation, allocator growth)
    prefill   steps with a prefill inside them (the engine's prefill ranges elsewhere are counted apart)
    drain     the engine's steps that launched no forward (step log `launched: false`: the overlapped decode's
              last step of a batch only reads the tokens of the one before): no GPU time, not a step's cost

Each of these gets its own line (steps, host time). For the steps left, per region: the mean and median of the
host time inside each step (the durations of that region's ranges in it) and of the GPU time of the kernels the
step launched, graph replays counted in the region where their node was captured (gpu_regions.py), each kernel
its own time on its stream (stream_time.py: under programmatic dependent launches a kernel starts while the one
before still runs, and its recorded duration includes that wait), and the regions inside fused kernels (their
stamps) each their own span. In a run of several processes (tensor-parallel ranks) the steps are rank 0's
(analysis/ranks.first_rank_ranges) and so are their GPU figures: another rank's kernels are its own, in the per-rank
GPU time (sections/gpu_time.py).
"""

from __future__ import annotations

import numpy as np

from roseprof.analysis.gpu_regions import gpu_ns_by_key
from roseprof.analysis.gpu_time import busy_by_group, distinct_devices
from roseprof.analysis.graphs import is_graph_launch
from roseprof.analysis.ranges import RangeTree, innermost_range
from roseprof.analysis.stats import dense_ids
from roseprof.analysis.steps import CPU_PREFIX, log_record_index
from roseprof.model import KERNEL, Trace, gpu_track_parts, is_gpu_track
from roseprof.workload.roseinfer import PREFILL
from roseprof.workload.steplog import StepLogRecords

MAX_REGIONS = 40  # rows kept in summary.json; the rest are smaller than the last one kept


def _step_of(times: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """[N] the step whose [start, end] holds each time, -1 where none does."""
    k = np.searchsorted(starts, times, side="right") - 1
    ok = (k >= 0) & (times >= 0) & (times <= ends[np.maximum(k, 0)])
    return np.where(ok, k, -1)


def _warmup_steps(
    rows: dict, log: StepLogRecords | None, replaying: np.ndarray, drains: np.ndarray
) -> np.ndarray:
    n = len(rows["dur_ns"])
    warm = np.zeros(n, dtype=bool)
    starts = sorted((log.run_starts if log is not None else []), key=lambda r: r["ts_ns"])
    index = np.asarray(rows.get("log_index", rows["index"]))
    if len(starts) > 1 and len(index) == n:
        # A run_start says `warmup` (engines since 2026-11); an older log's first of several runs is the
        # benchmark's default --warmup-runs 1.
        flagged = [isinstance(r.get("warmup"), bool) for r in starts]
        for i, r in enumerate(starts):
            is_warm = r["warmup"] if flagged[i] else (i == 0 and not any(flagged))
            if not is_warm:
                continue
            end = starts[i + 1]["next_step"] if i + 1 < len(starts) else np.inf
            warm |= (index >= r["next_step"]) & (index < end)
    if replaying.any():
        warm[: int(np.argmax(replaying))] = True
    if not (warm & ~drains).any() and (~drains).sum() > 1:  # the first step that launched (a drain did not)
        warm[int(np.argmax(~drains))] = True
    return warm


def _drain_steps(rows: dict, log: StepLogRecords | None) -> np.ndarray:
    """[n] the steps whose step-log record says `launched: false`, where the rows are the log's steps (joined by
    count, or by time: `log_index`)."""
    steps = log.steps if log is not None else []
    index = log_record_index(rows, len(steps))
    if index is None:
        return np.zeros(len(rows["dur_ns"]), dtype=bool)
    return np.array([0 <= k < len(steps) and not steps[k]["launched"] for k in index], dtype=bool)


def steady_state(
    trace: Trace,
    tree: RangeTree,
    launch_range: np.ndarray,
    capture: np.ndarray,
    own_ns: np.ndarray,  # [G] each kernel's own time on its stream (stream_time.own_stream_ns)
    rows: dict | None,
    region_cols: list[str],
    log: StepLogRecords | None,
    unit: str,
    step_name: str | None,
    pairs: tuple[np.ndarray, np.ndarray] | None = None,  # gpu_regions.kernel_range_pairs, shared by the run
    step_pids: list[int] | None = None,  # the processes the steps are (several ranks: rank 0's); None: all
) -> dict | None:
    if not rows or not rows.get("dur_ns"):
        return None
    starts = np.asarray(rows["start_ns"], dtype=np.int64)
    dur = np.asarray(rows["dur_ns"], dtype=np.int64)
    ends = starts + dur
    n = len(dur)
    ops, r = trace.ops, trace.ranges
    has_gpu = trace.has_gpu
    kernel = ops.kind == KERNEL

    # A kernel is in the step its launch call is in, among the steps' own process's launches: another rank launches
    # on its own host timeline, which rank 0's step windows do not cut into its steps
    def of_steps(tids: np.ndarray) -> np.ndarray:
        """[N] whether each thread is one of the steps' own processes' (all, in a run of one process)."""
        return (
            np.isin(trace.pids(tids), step_pids) if step_pids is not None else np.ones(len(tids), dtype=bool)
        )

    own = kernel & (ops.api_tid >= 0) & of_steps(ops.api_tid)
    op_step = np.where(own, _step_of(ops.api_start, starts, ends), -1)
    replaying = np.zeros(n, dtype=bool)
    graph = is_graph_launch(trace) & (op_step >= 0)
    replaying[op_step[graph]] = True

    # Capture: where graph nodes were made. Inside a step, the step is left out; outside, the outermost range
    # around the node (e.g. `hf.capture`, the engine's capture-time `roseinfer.model.forward`) is counted apart.
    nodes = trace.graph_nodes
    captures = np.zeros(n, dtype=bool)
    capture_roots: set[int] = set()
    # torch.profiler records no graph nodes, but the capture's runtime calls (host events, or launch calls); the
    # steps' own processes' only (another rank's capture runs on its own host timeline)
    calls, call_tids = _capture_calls(trace)
    at = _step_of(calls[of_steps(call_tids)], starts, ends)
    captures[at[at >= 0]] = True
    if len(nodes):
        node_step = np.where(of_steps(nodes.tid), _step_of(nodes.start, starts, ends), -1)
        captures[node_step[node_step >= 0]] = True
        inner = innermost_range(r.start, r.end, r.tid, tree, nodes.start, nodes.start, nodes.tid)
        for i in np.unique(inner[inner >= 0]).tolist():
            while tree.parent[i] >= 0:
                i = int(tree.parent[i])
            capture_roots.add(i)
    # (the steps' own processes' ranges only: another rank's capture and prefill are its own)
    roots = np.asarray(sorted(capture_roots), dtype=np.int64)
    roots = roots[of_steps(r.tid[roots]) & (_step_of(r.start[roots], starts, ends) < 0)]
    outside_steps = roots.tolist()

    prefill_col = f"region:{PREFILL}"
    prefills = np.asarray(rows[prefill_col]) > 0 if prefill_col in rows else np.zeros(n, dtype=bool)
    drains = _drain_steps(rows, log) & ~captures & ~prefills
    warm = _warmup_steps(rows, log, replaying, drains) & ~captures & ~prefills & ~drains
    steady = ~(warm | captures | prefills | drains)
    if not steady.any():
        return None

    # Host time per step and region: the step rows' region columns (ranges inside each step).
    host = {name: np.asarray(rows[f"region:{name}"], dtype=np.int64) for name in region_cols}
    # GPU time per step and region, graph replays where captured; each kernel its own time on its stream, so
    # that under programmatic dependent launches a step's GPU time is its busy time, not overlapping durations.
    gpu = {}
    step_gpu = None
    if has_gpu:
        keys, m = gpu_ns_by_key(
            trace, tree, launch_range, capture, r.name, op_step, n, op_ns=own_ns, pairs=pairs
        )
        gpu = {trace.names[int(k)]: m[:, j] for j, k in enumerate(keys.tolist()) if m[steady, j].any()}
        gpu.update(
            (name, v) for name, v in _inside_kernels_by_step(trace, op_step, n).items() if v[steady].any()
        )
        sel = kernel & (op_step >= 0)
        step_gpu = np.bincount(op_step[sel], weights=own_ns[sel], minlength=n)
        step_durations = np.bincount(op_step[sel], weights=(ops.end - ops.start)[sel], minlength=n)
        # The GPU's busy time a step: the union of its kernels on each device. Kernels of two streams that run at
        # once (a CUDA graph's parallel branches, a program's own streams) each keep their own time on their stream
        # above, so there the step's regions add up to more than this.
        step_busy = busy_by_group(op_step[sel], ops.device[sel], ops.start[sel], ops.end[sel], n)
    graph_names = set()
    if (capture >= 0).any():
        cur = capture[kernel & (capture >= 0) & (op_step >= 0)]
        cur = dense_ids(cur, len(r))[
            0
        ]  # the ranges that captured them, by a count (not a sort of the kernels)
        while len(cur):
            graph_names.update(trace.names[int(x)] for x in np.unique(r.name[cur]))
            cur = np.unique(tree.parent[cur][tree.parent[cur] >= 0])

    def stats(v) -> tuple[float | None, float | None]:
        if v is None:
            return None, None
        s = np.asarray(v, dtype=np.float64)[steady]
        return float(s.mean()), float(np.median(s))

    # Each region's own thread CPU time per step where the step log has it (version 3, regions on): mean and p5,
    # what a CPU diff judges a region by (no wait for a core is in it).
    def cpu_stats(column: str) -> tuple[float | None, float | None]:
        if column not in rows:
            return None, None
        s = np.asarray(rows[column], dtype=np.float64)[steady]
        return float(s.mean()), float(np.percentile(s, 5))

    # The ranges around the steps (a scheduler's step, a benchmark's run) hold every step's GPU time: not parts.
    around = {step_name}
    sid = trace.names.find(step_name) if step_name else -1
    cur = np.unique(tree.parent[r.name == sid]) if sid >= 0 else np.zeros(0, dtype=np.int64)
    cur = cur[cur >= 0]
    while len(cur):
        around.update(trace.names[int(x)] for x in np.unique(r.name[cur]))
        cur = np.unique(tree.parent[cur])
        cur = cur[cur >= 0]
    # A range that only wraps the capture outside the steps (`hf.capture`) holds every replayed kernel by the
    # capture rule, and no step runs it: it is on the capture's own line, not a part of the step.
    around.update(trace.names[int(r.name[i])] for i in outside_steps)
    around -= set(region_cols) - {step_name}
    regions = []
    for name in dict.fromkeys([*host, *gpu]):
        if name in around:
            continue
        hm, hp = stats(host.get(name, np.zeros(n)))
        gm, gp = stats(gpu.get(name, np.zeros(n))) if has_gpu else (None, None)
        if not hm and not gm:  # ran only in the steps left out (an eager warm-up, the capture)
            continue
        cm, c5 = cpu_stats(CPU_PREFIX + name)
        regions.append(
            {
                "name": name,
                "host_mean_ns": hm,
                "host_p50_ns": hp,
                "gpu_mean_ns": gm,
                "gpu_p50_ns": gp,
                "cpu_own_mean_ns": cm,
                "cpu_own_p5_ns": c5,
                "graph": name in graph_names,
            }
        )
    regions.sort(key=lambda e: -max(e["host_mean_ns"] or 0, e["gpu_mean_ns"] or 0))
    hm, hp = stats(dur)
    gm, gp = stats(step_gpu) if has_gpu else (None, None)

    def left_out(mask: np.ndarray) -> dict:
        return {"steps": int(mask.sum()), "host_ns": int(dur[mask].sum())}

    excluded = {
        "warmup": left_out(warm),
        "capture": left_out(captures),
        "prefill": left_out(prefills),
        "drain": left_out(drains),
    }
    excluded["capture"]["ranges"] = len(outside_steps)
    excluded["capture"]["range_host_ns"] = int(sum(int(r.end[i] - r.start[i]) for i in outside_steps))
    excluded["capture"]["range_names"] = sorted({trace.names[int(r.name[i])] for i in outside_steps})
    pid = trace.names.find(PREFILL)
    if pid >= 0:
        pre = np.flatnonzero(r.name == pid)
        pre = pre[(_step_of(r.start[pre], starts, ends) < 0) & of_steps(r.tid[pre])]
        excluded["prefill"]["ranges"] = len(pre)
        excluded["prefill"]["range_host_ns"] = int((r.end[pre] - r.start[pre]).sum())
    elif log is not None and log.prefills:
        excluded["prefill"]["ranges"] = len(log.prefills)
        excluded["prefill"]["range_host_ns"] = int(sum(p["end_ns"] - p["start_ns"] for p in log.prefills))
    steady_kernels = kernel & (op_step >= 0)
    steady_kernels[steady_kernels] = steady[op_step[steady_kernels]]
    return {
        "unit": unit,
        "step_name": step_name,
        # the GPUs whose kernels the steps hold, and in a run of several processes (ranks) the steps' own ones:
        # its GPU figures are theirs alone
        "gpus": len(distinct_devices(ops.device[steady_kernels])) if has_gpu else 0,
        "pids": step_pids,
        # their rank where a step log says it (-1: no rank known)
        "rank": int(trace.ranks(np.asarray(step_pids[:1]))[0]) if step_pids else None,
        "steps": n,
        "counted": int(steady.sum()),
        "excluded": excluded,
        "step": {
            "host_mean_ns": hm,
            "host_p50_ns": hp,
            "gpu_mean_ns": gm,
            "gpu_p50_ns": gp,
            # the same kernels' durations summed: above gpu_mean_ns where kernels of a stream overlap (PDL)
            "gpu_durations_mean_ns": float(step_durations[steady].mean()) if has_gpu else None,
            # the union of the same kernels on each GPU: below gpu_mean_ns where kernels of two streams ran at once
            "gpu_busy_mean_ns": float(step_busy[steady].mean()) if has_gpu else None,
            # the step's thread CPU time (the step region's own and its children's): mean and p5
            **dict(zip(("cpu_mean_ns", "cpu_p5_ns"), cpu_stats("cpu_ns"))),
        },
        "regions": regions[:MAX_REGIONS],
        "regions_total": len(regions),
        # GPU time of graph replays is in the regions they were captured in (the trace has the graph's nodes).
        "graph_replays": bool(replaying[steady].any() and (capture >= 0).any()),
    }


def _inside_kernels_by_step(trace: Trace, op_step: np.ndarray, n: int) -> dict[str, np.ndarray]:
    """Regions inside kernels (a fused kernel's stamps: GPU ranges of its launches, workload/kernel_stamps.py),
    their GPU time per step [n] by name: each range in the step of the kernel that started last before it on its
    GPU, which is the launch it was placed in or one that started early beside it (programmatic dependent launch),
    of the same step: a step's replay ends before the next step's kernels start."""
    r, o = trace.ranges, trace.ops
    inside = np.flatnonzero(is_gpu_track(r.tid))
    if not len(inside):
        return {}
    device, _, _ = gpu_track_parts(r.tid[inside])
    kernels = np.flatnonzero(o.kind == KERNEL)  # by start
    step = np.full(len(inside), -1, dtype=np.int64)
    for d in np.unique(device).tolist():
        mine = kernels[o.device[kernels] == d]
        if not len(mine):  # ranges on a GPU that ran no kernel the trace kept: no step to put them in
            continue
        at = np.searchsorted(o.start[mine], r.start[inside[device == d]], side="right") - 1
        step[device == d] = np.where(at >= 0, op_step[mine[np.maximum(at, 0)]], -1)
    ok = step >= 0
    names, ids = np.unique(r.name[inside[ok]], return_inverse=True)
    dur = (r.end - r.start)[inside[ok]]
    return {
        trace.names[int(name)]: np.bincount(step[ok][ids == j], weights=dur[ids == j], minlength=n)
        for j, name in enumerate(names.tolist())
    }


CAPTURE_CALLS = (
    "BeginCapture",
    "EndCapture",
    "GraphInstantiate",
)  # cudaStreamBeginCapture, cuGraphInstantiate...


def _capture_calls(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """Start times and thread ids of the runtime/driver calls that capture or instantiate a CUDA graph."""
    names = trace.names.values
    hit = np.array([any(c in v for c in CAPTURE_CALLS) for v in names], dtype=bool)
    if not hit.any():
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    h, o = trace.host_events, trace.ops
    parts = [(h.start[hit[h.name]], h.tid[hit[h.name]])] if len(h) else []
    named = o.api_name >= 0
    if named.any():
        called = hit[o.api_name[named]]
        parts.append((o.api_start[named][called], o.api_tid[named][called]))
    if not parts:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate([t for t, _ in parts]), np.concatenate([tid for _, tid in parts])
