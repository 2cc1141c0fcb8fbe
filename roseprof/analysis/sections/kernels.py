"""Kernels of a timeline (nsys, torch): one row per (kernel, launching region, capture-time region), and by the
region each ran for. ncu runs have their own kernel views (ncu_kernels.py)."""

from __future__ import annotations

import numpy as np

from roseprof.analysis.diff_metric import Sample, Sides, common, outside_figure, per_run
from roseprof.analysis.samples import kernel_samples
from roseprof.analysis.sections.base import Context, KernelKeys, Section, SectionResult
from roseprof.analysis.stats import group_percentiles, pct, unique_rows
from roseprof.model import KERNEL, Trace
from roseprof.run.checks import NUM, OPT_NUM


def compute(ctx: Context) -> SectionResult:
    trace, gpu = ctx.trace, ctx.gpu
    kernels, kernel_regions = [], []
    is_kernel = trace.ops.kind == KERNEL
    if is_kernel.any():
        keys = ctx.kernel_keys  # factorised once per run (sections/base.py)
        k_dur = (trace.ops.end - trace.ops.start)[keys.kernels]
        uniq, inverse = keys.rows, keys.row
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
        kernel_regions = _kernels_by_owner(trace, keys, k_dur)
    unattributed = int((gpu.op_range[is_kernel] < 0).sum()) if is_kernel.any() else 0
    return SectionResult(
        {
            "kernels": kernels,
            # Kernels by the region they ran for: graph replays where captured, the others where launched.
            "kernel_regions": kernel_regions,
            "kernels_outside_ranges": unattributed,
        }
    )


def _kernels_by_owner(trace: Trace, keys: KernelKeys, k_dur: np.ndarray, top: int = 200) -> list[dict]:
    """One row per (kernel name, region it belongs to: the innermost capture-time region of a graph-replayed
    kernel, the innermost launching region of the others), largest first."""
    k_capture = keys.capture
    # The (name, owner) pairs factorised over the distinct (name, region, capture) rows, not over the kernels.
    rows = keys.rows
    owner = np.where(rows[:, 2] >= 0, rows[:, 2], rows[:, 1])
    uniq, of_row = unique_rows([rows[:, 0], owner], len(trace.names))
    inverse = of_row[keys.row]
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


def diff_kernels(sides: Sides) -> list[dict]:
    """Per kernel: its total time per decode step (launched in each step, each launch its own time on its stream
    so that a PDL kernel is not charged for its wait; resampled over steps) with its launches per step on each
    side, and its own time launched outside the steps as a figure per run (`outside_ns`: warm-up, graph capture);
    or its summed own time per run where a run has no steps."""
    ga, gb, norm, per_step = sides.before, sides.after, sides.norm, sides.per_step
    metrics = []
    for name in common([r.kernel_durations for r in sides.runs]):
        in_steps = per_step and all(name in r.kernel_steps for r in sides.runs)
        if in_steps:

            def side(g, name=name):
                return Sample([r.kernel_steps[name][0] for r in g], None, None, norm(g))
        else:

            def side(g, name=name):
                return Sample([r.kernel_own[name] for r in g], None, None, per_run(g))

        m = sides.metric(f"kernels.{name}.total_ns", side(ga), side(gb), np.sum)
        m["per_step"] = in_steps  # how the views label it
        if in_steps and all(name in r.kernel_launches for r in sides.runs):
            # launches a decode step, each side's steps together: the verdict words a kernel whose count moved
            m["launches_a"], m["launches_b"] = (
                float(np.mean(np.concatenate([r.kernel_launches[name] for r in g]))) for g in (ga, gb)
            )
        metrics.append(m)
        if in_steps:
            out_a, out_b = ([r.kernel_steps[name][1] for r in g] for g in (ga, gb))
            metrics.append(outside_figure(f"kernels.{name}.outside_ns", out_a, out_b))
    return metrics + gpu_kernel_time(sides)


# The GPU's kernel time per decode step, the time the step's kernels kept the GPU busy (their union: on one
# stream every kernel's own time on it summed; where two streams ran at once, a graph's parallel branches,
# once): a figure of the whole run, judged like the step time. The own times summed over streams would call a
# step whose halves ran side by side slower by each half's time (+57.5% where the busy time moved +12%: the
# H200 fixtures of a batch of 224 on one stream and as two halves, tests/roseprof/test_diff_streams.py). A
# profiled batch-1 GPU step is host-bound (the step log and the stamps cost the host more than the GPU's work:
# 0.49 ms a step against 0.15 ms of kernels, docs/BENCHMARKS.md session 26), so a kernel path 25% slower moved
# no wall-clock figure, and each kernel's own row read "more launches" (the same GEMV given other work) or
# new/vanished: nothing said the GPU's work grew. A busier host does not lengthen a kernel. One GPU a run
# only: several ranks' kernels include their collectives, whose time is also the wait for the other ranks (43%
# of the summed kernel time of the TP=2 H200 fixture), which a slower host on one rank moves; the per-rank
# figures of sections/gpu_time.py set compute apart from communication there.
GPU_KERNEL_P50 = "gpu.kernel_p50_ns"


def gpu_kernel_time(sides: Sides) -> list[dict]:
    """GPU_KERNEL_P50, resampled over the steps, where every run is of one GPU and launched kernels inside its
    decode steps (an ncu run's launches have no launch time, so none is inside a step)."""
    runs = sides.runs
    if not sides.per_step or not all(r.kernel_steps for r in runs):
        return []
    if any(len(((r.summary or {}).get("gpu_time") or {}).get("ranks") or []) != 1 for r in runs):
        return []
    # [S] ns the kernels launched in each step kept the GPU busy, per run
    per_step = [r.step_gpu_busy for r in runs]
    if not all(v is not None and v.any() for v in per_step):
        return []
    n = len(sides.before)
    a, b = Sample(per_step[:n]), Sample(per_step[n:])
    return [sides.metric(GPU_KERNEL_P50, a, b, pct(50), q=50)]


# What a stored summary.json must hold here (run/checks.py's spec language); ncu's kernel table has the same rows.
CHECKS = {
    "kernels": (
        [{"name": str, "count": int, "total_ns": NUM, "p50_ns": OPT_NUM, "region": (str, None)}],
        None,
    ),
}

SECTION = Section(
    "kernels",
    compute,
    applies=lambda trace: trace.kernel_metrics is None,
    checks=CHECKS,
    diff_samples={"kernels": diff_kernels},
    diff_prepare=kernel_samples,
)
