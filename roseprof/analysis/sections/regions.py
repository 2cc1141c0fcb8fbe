"""Regions: one row per (domain, range name), like `nsys stats`' NVTX summary."""

from __future__ import annotations

import numpy as np

from roseprof.analysis import machine_speed, noise_floor
from roseprof.analysis.diff_metric import (
    CPU_OWN,
    CPU_OWN_LOW,
    CPU_OWN_LOW_RAW,
    LOW_OWN,
    LOW_OWN_Q,
    Sample,
    Sides,
    common,
    figure,
    low_cpu,
    low_own,
    outside_figure,
    per_run,
)
from roseprof.analysis.gpu_regions import gpu_ns_by_key
from roseprof.analysis.samples import region_samples
from roseprof.analysis.sections.base import Context, Section, SectionResult
from roseprof.analysis.stats import group_percentiles, pct
from roseprof.model import is_gpu_track
from roseprof.run.checks import NUM, OPT_NUM


def compute(ctx: Context) -> SectionResult:
    trace, tree, gpu = ctx.trace, ctx.tree, ctx.gpu
    start, end = trace.ranges.start, trace.ranges.end
    dur = end - start
    has_gpu = trace.has_gpu
    regions = []
    if len(start):
        uniq, inverse = ctx.region_keys  # (domain, name) of each range, factorised once per run
        pct = dict(zip(uniq.tolist(), group_percentiles(inverse, dur).values()))
        count = np.bincount(inverse)
        total = np.bincount(inverse, weights=dur)
        self_total = np.bincount(inverse, weights=tree.self_ns)
        on_gpu = is_gpu_track(trace.ranges.tid)  # GPU ranges: GPU time themselves (analysis/ranges.py)
        has_ops = (gpu.op_count > 0) | on_gpu
        proj = np.where(has_ops, gpu.proj_end - gpu.proj_start, 0)
        proj_total = np.bincount(inverse, weights=proj)
        kern_total = np.bincount(inverse, weights=gpu.kernel_ns)
        graph_total = np.bincount(inverse, weights=ctx.graph_ns)
        # Kernel time with graph replays counted where captured (gpu_regions.py): what the views show.
        present, by_capture = gpu_ns_by_key(
            trace, tree, gpu.op_range, ctx.capture, inverse.ravel(), pairs=ctx.kernel_pairs
        )
        gpu_total = np.zeros(len(uniq), dtype=np.int64)
        gpu_total[present] = by_capture[0]
        gpu_total += np.bincount(inverse[on_gpu], weights=dur[on_gpu], minlength=len(uniq)).astype(np.int64)
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
    return SectionResult({"regions": regions})


def diff_regions(sides: Sides) -> list[dict]:
    """Per region: its total time and count and its own time (less its children), per decode step where the runs
    have steps, else per run. A region that runs inside the steps counts its time in them only, its own time at the
    before side's machine speed (machine_speed.py: where the time moved); what it spent outside the steps (warm-up,
    graph capture: once a run) is a figure per run of its own (`outside_ns`), so that a start-up cost that moved
    is not read as time per step. A region that never runs inside a step is compared per run."""
    ga, gb = sides.before, sides.after
    per_step, speeds = sides.per_step, sides.speeds
    speed_a, speed_b = speeds or ([1.0] * len(ga), [1.0] * len(gb))
    # The waits that LOW_OWN leaves out are a shared CPU's. On a GPU the host's regions are microseconds of launch
    # and waiting for the device, whose p5 is the clock's grain (`h2d_block_tables`: 0.6 µs), and the mean is
    # what the H100 calibration measured: GPU diffs judge the mean.
    cpu_only = noise_floor.device_of(any(r.kernel_durations for r in sides.runs)) == "cpu"
    low_speeds = (
        machine_speed.speed_factors(ga, gb, low_own, machine_speed.LOW_MIN_SHARE)
        if per_step and cpu_only
        else None
    )
    low_a, low_b = low_speeds or ([1.0] * len(ga), [1.0] * len(gb))
    # Each region's own CPU time where every run has it (a CPU diff): the machine's speed by the same statistic.
    cpu_speeds = (
        machine_speed.speed_factors(
            ga, gb, low_cpu, machine_speed.LOW_MIN_SHARE, regions=lambda r: r.step_cpu
        )
        if per_step and cpu_only
        else None
    )
    metrics = []
    for name in common([r.region_durations for r in sides.runs]):
        in_steps = per_step and all(name in r.step_regions for r in sides.runs)
        # per decode step (the time inside the steps, resampled over steps), else per run (its instances)
        norm = sides.norm if in_steps else per_run

        def side(g, name=name, in_steps=in_steps, norm=norm):
            values = [r.step_regions[name] if in_steps else r.region_durations[name] for r in g]
            return Sample(values, None, None, norm(g))

        rows = [sides.metric(f"regions.{name}.total_ns", side(ga), side(gb), np.sum)]
        ca = sum(len(r.region_durations[name]) for r in ga) / sum(norm(ga))
        cb = sum(len(r.region_durations[name]) for r in gb) / sum(norm(gb))
        rows.append(figure(f"regions.{name}.count", ca, cb))
        if in_steps and all(name in r.step_self for r in sides.runs):

            def own(g, speed, name=name):
                scales = [s * n for s, n in zip(speed, sides.norm(g))]
                return Sample([r.step_self[name][0] for r in g], None, None, scales)

            m = sides.metric(f"regions.{name}.self_ns", own(ga, speed_a), own(gb, speed_b), np.sum)
            m["speed_normalised"] = speeds is not None
            rows.append(m)

            # The same in the steps no wait landed in (LOW_OWN_Q-th percentile over the steps): what "where the
            # time moved" judges a region by on a CPU (verdict._changes, docs/BENCHMARKS.md, session 7).
            def low(g, speed, name=name):
                return Sample([r.step_self[name][0] / s for r, s in zip(g, speed)])

            if low_speeds is not None:
                q = LOW_OWN_Q
                m = sides.metric(LOW_OWN.format(name), low(ga, low_a), low(gb, low_b), pct(q), q=q)
                m["speed_normalised"] = True
                rows.append(m)
            if cpu_speeds is not None and all(name in r.step_cpu for r in sides.runs):
                rows.extend(_cpu_own(sides, name, cpu_speeds))
        elif not in_steps and all(name in r.region_self for r in sides.runs):
            sa = sum(r.region_self[name] for r in ga) / sum(norm(ga))
            sb = sum(r.region_self[name] for r in gb) / sum(norm(gb))
            rows.append(figure(f"regions.{name}.self_ns", sa, sb))
        for m in rows:
            m["per_step"] = in_steps  # a figure per decode step (or per run): how the views label it
        metrics.extend(rows)
        if in_steps:
            metrics.append(
                outside_figure(f"regions.{name}.outside_ns", _outside(ga, name), _outside(gb, name))
            )
    return metrics


def _outside(runs: list, name: str) -> list[float]:
    """A region's time outside the decode steps, per run (ns)."""
    return [float(r.region_durations[name].sum() - r.step_regions[name].sum()) for r in runs]


def _cpu_own(sides: Sides, name: str, speeds: tuple[list[float], list[float]]) -> list[dict]:
    """A region's own thread CPU time per step (step log version 3): its mean and its LOW_OWN_Q-th percentile over
    the steps, resampled over steps, at the before side's machine speed (`speeds`, from the CPU times' p5s)."""

    def cpu(g, speed):
        return Sample([r.step_cpu[name] / s for r, s in zip(g, speed)])

    (ga, gb), (sa, sb) = (sides.before, sides.after), speeds
    mean = sides.metric(CPU_OWN.format(name), cpu(ga, sa), cpu(gb, sb), np.mean)
    low = sides.metric(CPU_OWN_LOW.format(name), cpu(ga, sa), cpu(gb, sb), pct(LOW_OWN_Q), q=LOW_OWN_Q)
    for m in (mean, low):
        m["speed_normalised"] = True
    ones_a, ones_b = [1.0] * len(ga), [1.0] * len(gb)
    raw = sides.metric(
        CPU_OWN_LOW_RAW.format(name), cpu(ga, ones_a), cpu(gb, ones_b), pct(LOW_OWN_Q), q=LOW_OWN_Q
    )
    raw["speed_normalised"] = False
    return [mean, low, raw]


# What a stored summary.json must hold here (run/checks.py's spec language).
CHECKS = {
    "regions": (
        [
            {
                "name": str,
                "domain": str,
                "count": int,
                "total_ns": NUM,
                "self_ns": NUM,
                "gpu_proj_ns": OPT_NUM,
                "gpu_kernel_ns": OPT_NUM,
                "p50_ns": OPT_NUM,
                "p99_ns": OPT_NUM,
            }
        ],
        None,
    ),
}

SECTION = Section(
    "regions", compute, checks=CHECKS, diff_samples={"regions": diff_regions}, diff_prepare=region_samples
)
