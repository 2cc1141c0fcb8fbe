"""Steps: the program's steps (the engine's decode steps from its step log or ranges, ProfilerStep, or
--step-range), their times with rollovers apart, and the GPU's idle time inside each; the per-step rows are the
`steps` table that the ITL, steady-state and diff work from."""

from __future__ import annotations

import numpy as np

from roseprof.analysis.diff_metric import Sides, common, sample
from roseprof.analysis.graphs import graph_warning, step_graph_columns
from roseprof.analysis.ranks import first_rank_ranges
from roseprof.analysis.samples import step_samples
from roseprof.analysis.sections.base import Context, Section, SectionResult
from roseprof.analysis.stats import pct
from roseprof.analysis.steps import (
    clock_offset,
    log_record_index,
    run_starts,
    step_kind,
    step_of_program,
    step_table,
    steps_summary,
)
from roseprof.run.checks import NS_STATS, NUM, OPT_NUM, MapOf


def compute(ctx: Context) -> SectionResult:
    trace, tree, log = ctx.trace, ctx.tree, ctx.log
    ranges = trace.ranges
    step_name, kind = step_names(ctx)
    step_ranges, step_note, step_pids = first_rank_ranges(trace)
    if step_note:
        ctx.warnings.append(step_note)
    rows, region_cols = step_table(
        trace.names.values,
        ranges.start,
        ranges.end,
        ranges.name,
        tree.parent,
        tree.depth,
        trace.marks.ts,
        trace.marks.name,
        log,
        ctx.warnings,
        clock_offset(trace.clock, trace.session_start_utc_ns, log),
        ctx.step_range,
        step_ranges,  # several ranks: rank 0's steps, the indices every rank shares
    )
    index = log_record_index(rows, len(log.steps)) if rows and log is not None and log.first_step else None
    if (
        index is not None
    ):  # a flight recorder's steps: the server's numbers, which the spikes and `request` say
        rows = {**rows, "step": [log.first_step + i for i in index]}
    graph_cols = step_graph_columns(rows, trace, ctx.capture, ctx.own_ns) if rows else []
    steps = steps_summary(rows, region_cols, graph_cols) if rows else None
    if steps is not None:
        # Only the engine's decode steps have rollovers; a program's steps are named by what marks them.
        steps["kind"] = kind
        steps["name"] = step_name
    note = graph_warning(trace, ctx.capture)
    if note:
        ctx.warnings.append(note)
    gpu_idle = None
    if rows and trace.has_gpu and len(rows["start_ns"]) > 1:
        idle = gpu_idle_per_step(rows, trace)
        rows = {**rows, "gpu_idle_ns": idle}  # a column of the steps table, beside the step's own
        v = np.asarray(idle, dtype=np.float64)
        gpu_idle = {
            "p50_ns": float(np.percentile(v, 50)),
            "p99_ns": float(np.percentile(v, 99)),
            "total_ns": int(v.sum()),
        }
    return SectionResult(
        {"steps": steps, "gpu_idle_between_steps": gpu_idle},
        {
            "steps": rows,
            "step_regions": region_cols,
            "run_starts": run_starts(log, len(rows["dur_ns"]) if rows else 0),
            # the processes whose steps these are (several ranks: rank 0's), None for a run of one process
            "step_pids": step_pids,
        },
    )


def step_names(ctx: Context) -> tuple[str, str]:
    """(the range or mark that makes one step, its kind: decode, profiler or the program's own)."""
    step_name = step_of_program(ctx.trace.names.values, ctx.has_log_steps, ctx.step_range)
    return step_name, step_kind(step_name, ctx.has_log_steps)


def gpu_idle_per_step(rows: dict, trace) -> list[int]:
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
    # Busy time before each window bound, from the disjoint, sorted busy intervals: the whole intervals that start
    # before it and the part of the last one that does; a window's busy time is the difference at its two bounds
    # (integers: exactly the clipped sum over the intervals in the window). A loop over the windows was 1.5 s of
    # the 1M-kernel import's 12,780 steps.
    if not len(bs):
        return [int(x) for x in np.diff(bounds).tolist()]
    whole = np.concatenate([[0], np.cumsum(be - bs)])  # [B + 1] busy time of the first j intervals
    j = np.searchsorted(bs, bounds, side="left")  # [S + 1] intervals that start before each bound
    last = np.maximum(j - 1, 0)
    busy_before = whole[last] + np.where(j > 0, np.minimum(be[last], bounds) - bs[last], 0)  # [S + 1]
    idle = np.diff(bounds) - np.diff(busy_before)  # [S]
    return [int(x) for x in idle.tolist()]


def diff_steps(sides: Sides) -> list[dict]:
    """Step time (all steps, rollover and normal apart: p50, p99, mean), resampled over steps; and for rollover and
    normal steps, where inside the step the time went (each region's mean and median ns per step)."""
    if not all(r.step_dur is not None for r in sides.runs):
        return []
    ga, gb = sides.before, sides.after
    metrics = []
    stats = {"p50": (pct(50), 50), "p99": (pct(99), 99), "mean": (np.mean, None)}
    # Rollover and normal steps are the engine's words: another program's steps (ProfilerStep, --step-range) are
    # compared as one kind.
    engine = all(((r.summary or {}).get("steps") or {}).get("kind", "decode") == "decode" for r in sides.runs)
    kinds = (("", None), ("rollover.", True), ("normal.", False)) if engine else (("", None),)
    for label, sel in kinds:

        def masks(g, sel=sel):
            return [np.ones(len(r.step_dur), bool) if sel is None else r.step_roll == sel for r in g]

        ma, mb = masks(ga), masks(gb)
        sa = sample([r.step_dur[m] for r, m in zip(ga, ma)])
        sb = sample([r.step_dur[m] for r, m in zip(gb, mb)])
        if sa.values and sb.values:
            for sname, (fn, q) in stats.items():
                metrics.append(sides.metric(f"steps.{label}{sname}_ns", sa, sb, fn, q=q))
        if label and any(m.any() for m in ma) and any(m.any() for m in mb):
            for name in common([r.step_regions for r in sides.runs]):
                ra = sample([r.step_regions[name][m] for r, m in zip(ga, ma)])
                rb = sample([r.step_regions[name][m] for r, m in zip(gb, mb)])
                metrics.append(sides.metric(f"steps.{label}regions.{name}", ra, rb, np.mean))
                metrics.append(sides.metric(f"steps.{label}regions_p50.{name}", ra, rb, np.median))
    if engine:
        metrics += rollover_cpu(sides)
    return metrics


# A region's own thread CPU time in the rollover steps, each run's at its own normal steps' pace of that region
# (verdict._rollover_changes judges the rollover path by it first). The wall time there is a few steps a run (5 in
# the CPU demo) that the machine's waits land in (one run's median 4.97 ms against 0.75-0.88 ms in its two
# siblings, docs/BENCHMARKS.md session 21), and the same code's CPU time drifts between runs by 30-45% (caches,
# clocks) in every step alike; so each run's rollover steps are divided by the same run's median in its normal
# steps and put back at the before side's (the geometric mean of its runs'). A change of the rollover path alone
# moves it; the machine, or a change in every step, does not.
AT_ROLLOVER_CPU = "steps.rollover.regions_cpu_p50."


def rollover_cpu(sides: Sides) -> list[dict]:
    """Each region's median own CPU time in the rollover steps at its normal steps' pace (AT_ROLLOVER_CPU), where
    every run has CPU times (step log version 3), rollover steps, and the region's time in its normal steps; CPU
    runs only."""
    runs = sides.runs
    if not all(r.step_cpu and r.step_roll is not None and r.step_roll.any() for r in runs):
        return []
    if any(r.kernel_durations for r in runs):
        return []  # on a GPU the host's CPU time does not see the kernels (as machine_speed.slowdown)
    metrics = []
    for name in common([r.step_cpu for r in runs]):
        pace = np.array(
            [np.median(r.step_cpu[name][~r.step_roll]) if (~r.step_roll).any() else 0 for r in runs]
        )
        if not np.all(pace > 0):
            continue  # a region of the rollover steps alone: nothing to pace it by
        ref = float(np.exp(np.log(pace[: len(sides.before)]).mean()))
        roll = [
            r.step_cpu[name][r.step_roll] * (ref / p) for r, p in zip(runs, pace)
        ]  # per run [rollover steps]
        ra, rb = sample(roll[: len(sides.before)]), sample(roll[len(sides.before) :])
        metrics.append(sides.metric(AT_ROLLOVER_CPU + name, ra, rb, np.median))
    return metrics


# What a stored summary.json must hold here (run/checks.py's spec language).
CHECKS = {
    "steps": (
        {
            **NS_STATS,
            "rollover": {**NS_STATS, "regions": (MapOf(OPT_NUM), None)},
            "normal": {**NS_STATS, "regions": (MapOf(OPT_NUM), None)},
            "rollover_excess": ({"region": str, "mean_ns": NUM}, None),
        },
        None,
    ),
}

SECTION = Section(
    "steps",
    compute,
    checks=CHECKS,
    stores={"steps": "steps.rows", "step_regions": "steps.regions", "run_starts": "steps.run_starts"},
    diff_samples={"steps": diff_steps},
    diff_prepare=step_samples,
)
