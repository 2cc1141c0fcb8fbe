"""Turn a parsed trace (+ the engine's step log) into the run's data: summary.json and normalised tables."""

from __future__ import annotations

import numpy as np

from roseprof.analysis import ncu
from roseprof.analysis.gpu_regions import gpu_ns_by_key
from roseprof.analysis.graphs import (
    attribution,
    capture_ranges,
    graph_kernel_ns,
    graph_warning,
    step_graph_columns,
)
from roseprof.analysis.ranges import attribute_gpu_ops, build_tree
from roseprof.analysis.spikes import analyse_spikes
from roseprof.analysis.stats import group_percentiles
from roseprof.analysis.steady import steady_state
from roseprof.analysis.steps import (
    clock_offset,
    itl_series,
    request_metrics,
    run_starts,
    step_kind,
    step_of_program,
    step_table,
    steps_summary,
)
from roseprof.model import Trace
from roseprof.workload.steplog import StepLogRecords

SUMMARY_SCHEMA = 1


def analyse(trace: Trace, log: StepLogRecords | None, step_range: str | None = None) -> tuple[dict, dict]:
    """Returns (summary, tables): summary is summary.json; tables are the normalised data kept beside it.
    `step_range`: the range that marks one step of a program that is not the engine (--step-range)."""
    warnings: list[str] = list(trace.warnings)  # what the reader had to assume, then what the analyses found
    start, end, tid = trace.ranges.start, trace.ranges.end, trace.ranges.tid
    tree = build_tree(start, end, tid)
    gpu = attribute_gpu_ops(
        start,
        end,
        tid,
        tree,
        trace.ops.kind,
        trace.ops.start,
        trace.ops.end,
        trace.ops.api_start,
        trace.ops.api_end,
        trace.ops.api_tid,
    )
    dur = end - start
    has_gpu = trace.has_gpu
    capture = capture_ranges(trace, tree)  # [G] capture-time range of graph-replayed ops, -1 otherwise
    graph_ns = graph_kernel_ns(trace, tree, capture)  # [R]

    # Regions: one row per (domain, name), like `nsys stats`' NVTX summary.
    regions = []
    if len(start):
        key = trace.ranges.domain * (len(trace.names) + 1) + trace.ranges.name
        pct = group_percentiles(key, dur)
        uniq, inverse = np.unique(key, return_inverse=True)
        count = np.bincount(inverse)
        total = np.bincount(inverse, weights=dur)
        self_total = np.bincount(inverse, weights=tree.self_ns)
        has_ops = gpu.op_count > 0
        proj = np.where(has_ops, gpu.proj_end - gpu.proj_start, 0)
        proj_total = np.bincount(inverse, weights=proj)
        kern_total = np.bincount(inverse, weights=gpu.kernel_ns)
        graph_total = np.bincount(inverse, weights=graph_ns)
        # Kernel time with graph replays counted where captured (gpu_regions.py): what the views show.
        present, by_capture = gpu_ns_by_key(trace, tree, gpu.op_range, capture, inverse.ravel())
        gpu_total = np.zeros(len(uniq), dtype=np.int64)
        gpu_total[present] = by_capture[0]
        for j, k in enumerate(uniq):
            name_id, dom_id = int(k % (len(trace.names) + 1)), int(k // (len(trace.names) + 1))
            p50, p99 = pct[int(k)]
            regions.append(
                {
                    "name": trace.names[name_id],
                    "domain": trace.domains[dom_id],
                    "count": int(count[j]),
                    "total_ns": int(total[j]),
                    "self_ns": int(self_total[j]),
                    "gpu_proj_ns": int(proj_total[j]) if has_gpu else None,
                    "gpu_kernel_ns": int(kern_total[j]) if has_gpu else None,
                    "gpu_graph_ns": int(graph_total[j]) if has_gpu else None,
                    "gpu_ns": int(gpu_total[j]) if has_gpu else None,
                    "p50_ns": p50,
                    "p99_ns": p99,
                }
            )
        regions.sort(key=lambda r: -r["total_ns"])

    # Kernels: one row per (kernel name, innermost region it was launched in, innermost region open when its
    # CUDA graph node was captured: None for kernels not replayed by a graph).
    kernels, kernel_regions = [], []
    is_kernel = trace.ops.kind == 0
    if is_kernel.any() and trace.kernel_metrics is None:
        k_name = trace.ops.name[is_kernel]
        k_range = gpu.op_range[is_kernel]
        # A kernel outside every range (or a trace with no range at all: `nsys profile -t cuda`) has no region.
        k_region = np.full(len(k_range), -1, dtype=np.int64)
        k_region[k_range >= 0] = trace.ranges.name[k_range[k_range >= 0]]
        k_cap = capture[is_kernel]
        k_capture = np.full(len(k_cap), -1, dtype=np.int64)
        k_capture[k_cap >= 0] = trace.ranges.name[k_cap[k_cap >= 0]]
        k_dur = (trace.ops.end - trace.ops.start)[is_kernel]
        uniq, inverse = np.unique(
            np.stack([k_name, k_region, k_capture], axis=1), axis=0, return_inverse=True
        )
        inverse = inverse.ravel()
        pct = group_percentiles(inverse, k_dur, qs=(50,))
        count = np.bincount(inverse)
        total = np.bincount(inverse, weights=k_dur)
        for j, (name_id, region_id, capture_id) in enumerate(uniq.tolist()):
            kernels.append(
                {
                    "name": trace.names[name_id],
                    "count": int(count[j]),
                    "total_ns": int(total[j]),
                    "p50_ns": pct[j][0],
                    "region": trace.names[region_id] if region_id >= 0 else None,
                    "capture_region": trace.names[capture_id] if capture_id >= 0 else None,
                }
            )
        kernels.sort(key=lambda r: -r["total_ns"])
        kernel_regions = _kernels_by_owner(trace, k_name, k_region, k_capture, k_dur)
    unattributed = int((gpu.op_range[is_kernel] < 0).sum()) if is_kernel.any() else 0
    if trace.kernel_metrics is not None:
        # ncu: no timeline to attribute kernels by; each launch names the NVTX ranges that enclosed it.
        kernels = ncu.kernels(trace)
        kernel_regions = []
        unattributed = sum(1 for r in ncu.regions(trace.kernel_metrics) if r is None)

    step_name = step_of_program(trace.names.values, bool(log is not None and log.steps), step_range)
    rows, region_cols = step_table(
        trace.names.values,
        start,
        end,
        trace.ranges.name,
        tree.parent,
        tree.depth,
        trace.marks.ts,
        trace.marks.name,
        log,
        warnings,
        clock_offset(trace.clock, trace.session_start_utc_ns, log),
        step_range,
    )
    graph_cols = step_graph_columns(rows, trace, capture) if rows else []
    steps = steps_summary(rows, region_cols, graph_cols) if rows else None
    kind = step_kind(step_name, bool(log is not None and log.steps))
    if steps is not None:
        # Only the engine's decode steps have rollovers; a program's steps are named by what marks them.
        steps["kind"] = kind
        steps["name"] = step_name
    unit = {"decode": "decode step", "profiler": "ProfilerStep"}.get(kind, step_name)
    steady = steady_state(
        trace, tree, gpu.op_range, capture, rows, region_cols, log, unit, step_name
    ) if trace.kernel_metrics is None else None  # fmt: skip
    note = graph_warning(trace, capture)
    if note:
        warnings.append(note)
    # Tokens name the log's step indices; rows joined by time cover only the profiled window of them.
    rolls = rows["rollovers"] if rows else None
    if rows and "log_index" in rows:
        rolls = [int(s.get("rollovers", 0)) for s in log.steps]
    spikes, spike_causes, left_out = analyse_spikes(log, rows, region_cols, trace)
    itl, requests = request_metrics(log, rolls, left_out)
    if itl is not None and spikes and spikes.get("left_out"):
        itl["left_out"] = spikes["left_out"]  # the tokens these figures leave out, and why
    marks = {}
    for m in trace.marks.name.tolist():
        marks[trace.names[m]] = marks.get(trace.names[m], 0) + 1

    gpu_idle = None
    if rows and has_gpu and len(rows["start_ns"]) > 1:
        gpu_idle = _gpu_idle_between_steps(rows, trace)

    summary = {
        "schema": SUMMARY_SCHEMA,
        "regions": regions,
        "kernels": kernels,
        # Kernels by the region they ran for: graph replays where captured, the others where launched.
        "kernel_regions": kernel_regions,
        "kernels_outside_ranges": unattributed,
        "gpu_ops": {
            "kernels": int(is_kernel.sum()),
            "kernel_ns": int((trace.ops.end - trace.ops.start)[is_kernel].sum()),
            "memcpy": int((trace.ops.kind == 1).sum()),
            "memset": int((trace.ops.kind == 2).sum()),
        }
        if has_gpu
        else None,
        "steps": steps,
        "steady": steady,
        "itl": itl,
        "requests": requests,
        "marks": [{"name": k, "count": v} for k, v in sorted(marks.items())],
        "gpus": trace.gpus,
        "gpu_idle_between_steps": gpu_idle,
        # Only where the tool recorded the calls that launched kernels (not ncu, which records none).
        "kernel_attribution": attribution(trace, gpu.op_range, capture)
        if has_gpu and (trace.ops.api_tid >= 0).any()
        else None,
        "warnings": warnings,
    }
    if trace.kernel_metrics is not None:
        summary["ncu"] = ncu.section(trace)
    series = itl_series(log, rolls, left_out)
    summary["spikes"] = spikes
    for row, cause in zip(series, spike_causes):
        row["spike_cause"] = cause  # per token: the spike's main cause, None for a token that is no spike
    tables = {
        "steps": rows,
        "step_regions": region_cols,
        "itl_series": series,
        "run_starts": run_starts(log, len(rows["dur_ns"]) if rows else 0),
        # Per GPU op: the innermost launching region and the capture-time region, as names (the export's args).
        "op_regions": _op_regions(trace, gpu.op_range, capture),
    }
    return summary, tables


def _op_regions(trace: Trace, launch_range: np.ndarray, capture: np.ndarray) -> dict:
    out = {}
    for key, rng in (("region", launch_range), ("capture_region", capture)):
        col = np.full(len(rng), -1, dtype=np.int64)
        col[rng >= 0] = trace.ranges.name[rng[rng >= 0]]
        out[key] = col
    return out


def _kernels_by_owner(trace: Trace, k_name, k_region, k_capture, k_dur, top: int = 200) -> list[dict]:
    """One row per (kernel name, region it belongs to: the innermost capture-time region of a graph-replayed
    kernel, the innermost launching region of the others), largest first."""
    owner = np.where(k_capture >= 0, k_capture, k_region)
    uniq, inverse = np.unique(np.stack([k_name, owner], axis=1), axis=0, return_inverse=True)
    inverse = inverse.ravel()
    pct = group_percentiles(inverse, k_dur, qs=(50,))
    count = np.bincount(inverse)
    total = np.bincount(inverse, weights=k_dur)
    replayed = np.bincount(inverse, weights=k_capture >= 0)
    rows = [
        {
            "name": trace.names[name_id],
            "region": trace.names[region_id] if region_id >= 0 else None,
            "count": int(count[j]),
            "graph_count": int(replayed[j]),
            "total_ns": int(total[j]),
            "p50_ns": pct[j][0],
        }
        for j, (name_id, region_id) in enumerate(uniq.tolist())
    ]
    rows.sort(key=lambda r: -r["total_ns"])
    return rows[:top]


def _gpu_idle_between_steps(rows: dict, trace: Trace) -> dict:
    """GPU idle time inside each step window [step start, next step start): window minus merged busy time."""
    starts = np.asarray(rows["start_ns"], dtype=np.int64)
    bounds = np.append(starts, starts[-1] + np.asarray(rows["dur_ns"])[-1])
    s, e = trace.ops.start, trace.ops.end
    # Merge overlapping ops (streams) into busy intervals, then clip them to windows.
    order = np.argsort(s)
    s, e = s[order], np.maximum.accumulate(e[order])
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > e[:-1]
    grp = np.cumsum(new) - 1
    bs = s[new]
    be = np.zeros(new.sum(), dtype=np.int64)
    np.maximum.at(be, grp, e)
    idle = []
    for i in range(len(starts)):
        lo, hi = bounds[i], bounds[i + 1]
        a = np.searchsorted(be, lo, side="right")
        b = np.searchsorted(bs, hi, side="left")
        busy = np.clip(np.minimum(be[a:b], hi) - np.maximum(bs[a:b], lo), 0, None).sum()
        idle.append(int(hi - lo - busy))
    rows["gpu_idle_ns"] = idle
    v = np.asarray(idle, dtype=np.float64)
    return {
        "p50_ns": float(np.percentile(v, 50)),
        "p99_ns": float(np.percentile(v, 99)),
        "total_ns": int(v.sum()),
    }
