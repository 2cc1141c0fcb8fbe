"""Compare two runs: per-metric deltas with bootstrap confidence intervals, and a regression verdict.

Method (printed with every diff): each metric is a statistic of a sample (step times, ITL, a region's
instance durations, a kernel's instance durations). Both samples are resampled with replacement
(RESAMPLES times, seeded), the statistic is recomputed on each pair, and the 95% interval of the relative
change (b - a) / a is read off the percentiles of those resampled changes. No interval (so never significant) below MIN_SAMPLES samples per run, or, for a high
percentile, below the number that leaves TAIL_SAMPLES beyond it (p95: 40, p99: 200; bootstrap.min_samples). Totals
(region and kernel time, a region's own time) are divided by the run's number of decode steps
(or compared as run totals when either run has no steps), so runs of different length compare fairly. A change
is called one (`significant`) only when its interval clears its family's noise floor (noise_floor.py), not just 0.
"""

from __future__ import annotations

import fnmatch

import numpy as np

from roseprof.analysis import noise_floor
from roseprof.analysis.bootstrap import (
    CONFIDENCE,
    LARGE_RESAMPLES,
    LARGE_SAMPLE,
    MIN_SAMPLES,
    RESAMPLES,
    TAIL_SAMPLES,
    min_samples,
)
from roseprof.analysis.diff_metric import Sample, Sides  # noqa: F401  (Sample: the scripts and tests know it here)
from roseprof.analysis.diff_metric import metric as _metric  # noqa: F401  (the tests know it by this name)
from roseprof.analysis.noise_floor import NoiseFloor
from roseprof.analysis.run_data import RunData
from roseprof.analysis.sections import DIFF_ORDER, SECTIONS

METHOD = (
    f"bootstrap: {RESAMPLES} resamples ({LARGE_RESAMPLES} over {LARGE_SAMPLE:,} values) of each run's decode steps (ITL: the steps that produced the tokens; "
    f"regions outside the step: their instances), {int(CONFIDENCE * 100)}% percentile interval of the relative "
    f"change; a change when it clears its family's noise floor (never when of zero width); no interval under {MIN_SAMPLES} samples per run, nor for a "
    f"percentile with fewer than {TAIL_SAMPLES} samples beyond it (p95: {min_samples(95)}, p99: "
    f"{min_samples(99)}); ITL is resampled by decode step; region and kernel totals are per decode step; where "
    "the time moved judges a region by its own thread CPU time where every run has it (CPU runs with the step "
    "log's CPU times: no wait for a core is in it), else by its own time in the steps no wait for a core landed "
    "in (either: p5 over the steps, at the before side's machine speed)"
)
HIERARCHICAL_METHOD = (
    "hierarchical bootstrap over groups of runs ({n_a} before, {n_b} after): {resamples} resamples, each drawing "
    "the runs with replacement and then the decode steps inside each drawn run (ITL: the steps that produced the "
    "tokens; regions outside the step: their instances), statistic on the pooled resample, and again with every "
    "run kept once (the within-run part of each side's variance; the rest is between runs, corrected by n/(n-1)); "
    "{conf}% interval log(after/before) +- t sqrt(V_before + V_after), Welch's degrees of freedom from the "
    "between-run parts; a change when it clears its family's noise floor (never when of zero width); the same "
    f"sample minimums as one run a side ({MIN_SAMPLES}; p95: {min_samples(95)}, p99: {min_samples(99)}); totals "
    "are per decode step; a region's own time per step at the before side's machine speed, judged in where the "
    "time moved by the p5 over the steps of its own thread CPU time where every run has it, else of its own time "
    "(the steps no wait for a core landed in)"
)


# A diff of loads (roseprof load): its samples are requests, not decode steps (sections/serving.py).
LOAD_METHOD = (
    f"bootstrap: {RESAMPLES} resamples of each load's requests (TTFT, TPOT, E2E: one value a request; ITL: every "
    f"gap, resampled by the request it belongs to), {int(CONFIDENCE * 100)}% percentile interval of the relative "
    f"change; a change when it clears its family's noise floor (never when of zero width); no interval under "
    f"{MIN_SAMPLES} requests per run, nor for a percentile with fewer than {TAIL_SAMPLES} samples beyond it (p95: "
    f"{min_samples(95)}, p99: {min_samples(99)}); a sweep compares rate with rate; throughput and goodput are one "
    "figure a load, with no interval"
)


def method(n_a: int, n_b: int, floor: NoiseFloor | None = None, loads: bool = False) -> str:
    """The method text printed with every diff: the within-run bootstrap for one run a side, else hierarchical;
    then the noise floor applied. `loads`: every run is a load (its samples are requests)."""
    floors = f"; noise floor: {floor.describe()}" if floor is not None else ""
    if loads:
        groups = (
            ""
            if n_a == 1 and n_b == 1
            else f" (groups: {n_a} before, {n_b} after, hierarchical: loads, then requests)"
        )
        return LOAD_METHOD + groups + floors
    if n_a == 1 and n_b == 1:
        return (
            f"{METHOD} (one run a side: the interval sees the noise inside each run, not the drift between "
            f"runs; compare groups of runs, e.g. roseprof nsys --repeat 3, to have it){floors}"
        )
    text = HIERARCHICAL_METHOD.format(n_a=n_a, n_b=n_b, resamples=RESAMPLES, conf=int(CONFIDENCE * 100))
    return text + floors


# What gate() below looks at unless patterns say otherwise (`roseprof diff` gates its decision: decision.gate): the user-facing step and ITL medians and means. Region and
# kernel metrics are many (one per range and kernel) and some move by tens of percent between two captures of the
# same code on a shared machine (seen: roseinfer.sample +57%), which a within-run interval cannot know; gate on
# them by name with --metric, on groups of runs (3 a side: the hierarchical interval has the drift in it).
DEFAULT_GATE = [
    "steps.p50_ns",
    "steps.mean_ns",
    "steps.rollover.p50_ns",
    "steps.normal.p50_ns",
    "itl.p50_ms",
    "itl.at_rollover.p50_ms",
    "itl.elsewhere.p50_ms",
    # a load (roseprof load): the client's latencies, bootstrapped over requests
    "serving.ttft.p50_ms",
    "serving.tpot.p50_ms",
    "serving.itl.p50_ms",
    "serving.e2e.p50_ms",
    # a sweep (roseprof load --sweep): the same at every rate both sides measured
    "sweep.*.ttft.p50_ms",
    "sweep.*.tpot.p50_ms",
    "sweep.*.itl.p50_ms",
    "sweep.*.e2e.p50_ms",
]


def _group(x: RunData | list[RunData]) -> list[RunData]:
    return [x] if isinstance(x, RunData) else list(x)


def floor_for(
    a: RunData | list[RunData], b: RunData | list[RunData], min_effect_pct: float | None = None
) -> NoiseFloor:
    """The noise floor of a diff of group a against group b: their device's calibrated floors (those of one run a
    side when each side is one run: its interval cannot see the drift between runs), or --min-effect for all."""
    ga, gb = _group(a), _group(b)
    device = noise_floor.device_of(any(r.kernel_durations for r in ga + gb))
    return NoiseFloor(device, min_effect_pct, one_run=len(ga) == 1 and len(gb) == 1)


def compare(
    a: RunData | list[RunData], b: RunData | list[RunData], seed: int = 0, floor: NoiseFloor | None = None
) -> list[dict]:
    """Every metric of group a (before) against group b (after): one run a side, or several; each marked against
    the noise floor (default: floor_for, the runs' device's calibrated floors for this many runs a side). The metrics are the analysis sections'
    (analysis/sections/: diff_samples, diff_metrics), asked in one order with one seeded generator."""
    ga, gb = _group(a), _group(b)
    sides = Sides(ga, gb, np.random.default_rng(seed))
    metrics = [m for _, offer in families() for m in offer(sides)]
    sides.intervals()
    for m in metrics:
        # Totals per decode step (regions, kernels) say so; every other metric is a figure per run.
        m["per_step"] = bool(m.pop("per_step", False))
    return noise_floor.apply(metrics, floor or floor_for(ga, gb))


def compare_own(
    a: RunData | list[RunData],
    b: RunData | list[RunData],
    metrics: list[dict],
    method_text: str,
    floor: NoiseFloor,
) -> tuple[list[dict], str, bool]:
    """(metrics, method, taken): where a section compares such runs in a way of its own (`Section.diff_compare`:
    ncu's launch by launch), its metrics and method, and taken True; else those given, and False."""
    ga, gb = _group(a), _group(b)
    for section in SECTIONS:
        if section.diff_compare is not None:
            own = section.diff_compare(ga, gb, metrics, floor)
            if own is not None:
                return own[0], own[1], True
    return metrics, method_text, False


def families() -> list[tuple]:
    """Every (family, Sides -> metrics) the sections offer: the built-in families in DIFF_ORDER (the order their
    resamples have always been drawn in, so the same runs keep the same intervals), then the others in SECTIONS'
    order."""
    offered = [f for section in SECTIONS for f in section.diff_families()]
    order = {name: i for i, name in enumerate(DIFF_ORDER)}
    return sorted(
        offered, key=lambda f: order.get(f[0], len(order))
    )  # stable: the others keep SECTIONS' order


def gate(metrics: list[dict], threshold_pct: float | None, patterns: list[str] | None) -> list[dict]:
    """Mark and return the regressions among bare metrics (the calibration scripts' gate, on compare()'s output): a
    gated metric that grew (or, higher-is-better, fell) by more than threshold_pct and beyond its noise floor
    (`significant`: the interval clears the floor). `roseprof diff` gates its one decision instead
    (decision.gate: the rows its answer names), so that the gate and the answer agree."""
    patterns = patterns or DEFAULT_GATE
    out = []
    for m in metrics:
        gated = any(fnmatch.fnmatchcase(m["name"], p) for p in patterns)
        d = m["delta_pct"]
        worse = d is not None and (d > 0 if m["lower_is_better"] else d < 0)
        m["regression"] = bool(
            threshold_pct is not None and gated and worse and m["significant"] and abs(d) > threshold_pct
        )
        if m["regression"]:
            out.append(m)
    return out


def kernel_changes(a: RunData | list[RunData], b: RunData | list[RunData]) -> dict:
    """Kernels only in one group (new in b, vanished from a), with their per-step time."""
    ga, gb = _group(a), _group(b)
    per_step = all(r.steps for r in ga + gb)
    na = sum(r.steps for r in ga) if per_step else len(ga)
    nb = sum(r.steps for r in gb) if per_step else len(gb)
    in_a = set().union(*(r.kernel_durations for r in ga))
    in_b = set().union(*(r.kernel_durations for r in gb))

    def time(r: RunData, k: str) -> float:
        # each launch's own time on its stream, in the steps where the runs have steps: as the kernels both sides
        # have are compared (samples.RunData, sections/kernels.py)
        if per_step and k in r.kernel_steps:
            return float(r.kernel_steps[k][0].sum())
        return float(r.kernel_own.get(k, np.zeros(0)).sum())

    new = {k: sum(time(r, k) for r in gb) / nb for k in in_b - in_a}
    gone = {k: sum(time(r, k) for r in ga) / na for k in in_a - in_b}
    return {
        "new": sorted(new.items(), key=lambda kv: (-kv[1], kv[0])),  # ties by name: the same order every run
        "vanished": sorted(gone.items(), key=lambda kv: (-kv[1], kv[0])),
    }


def rank(metrics: list[dict]) -> list[dict]:
    """By evidence, then by size of change: the changes (interval beyond the noise floor); then the moves whose
    interval excludes no change but stays inside the floor; then the other metrics with an interval; last the
    figures with none (per-run totals, throughput). By size alone, a diff with no change led with per-run totals
    of -93% [-99.8, +157] (a first run's compile time) and hid an ITL p50 of -5.2% [-8.5, -1.7] (docs/
    BENCHMARKS.md, session 14)."""

    def evidence(m: dict) -> int:
        lo, hi = m.get("ci_low_pct"), m.get("ci_high_pct")
        if m["significant"]:
            return 0
        if lo is None or hi is None:
            return 3
        return 1 if lo > 0 or hi < 0 else 2

    return sorted(metrics, key=lambda m: (evidence(m), -abs(m["delta_pct"] or 0)))
