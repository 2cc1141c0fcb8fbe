"""Compare two runs: per-metric deltas with bootstrap confidence intervals, and a regression verdict.

Method (printed with every diff): each metric is a statistic of a sample (step times, ITL, a region's
instance durations, a kernel's instance durations). Both samples are resampled with replacement
(RESAMPLES times, seeded), the statistic is recomputed on each pair, and the 95% interval of the relative
change (b - a) / a is read off the percentiles of those resampled changes. No interval (so never significant) below MIN_SAMPLES samples per run, or, for a high
percentile, below the number that leaves TAIL_SAMPLES beyond it (p95: 40, p99: 200; stats.min_samples). Totals
(region and kernel time, a region's own time) are divided by the run's number of decode steps
(or compared as run totals when either run has no steps), so runs of different length compare fairly. A change
is called one (`significant`) only when its interval clears its family's noise floor (noise_floor.py), not just 0.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import numpy as np

from roseprof.analysis import machine_speed, noise_floor
from roseprof.analysis.noise_floor import NoiseFloor
from roseprof.analysis.samples import RunData
from roseprof.analysis.sections import SECTIONS
from roseprof.analysis.stats import (
    CONFIDENCE,
    LARGE_RESAMPLES,
    LARGE_SAMPLE,
    MIN_SAMPLES,
    RESAMPLES,
    TAIL_SAMPLES,
    clustered,
    group_interval,
    hierarchical,
    interval,
    min_samples,
    pct,
    resampled,
)

METHOD = (
    f"bootstrap: {RESAMPLES} resamples ({LARGE_RESAMPLES} over {LARGE_SAMPLE:,} values) of each run's decode steps (ITL: the steps that produced the tokens; "
    f"regions outside the step: their instances), {int(CONFIDENCE * 100)}% percentile interval of the relative "
    f"change; a change when it clears its family's noise floor (never when of zero width); no interval under {MIN_SAMPLES} samples per run, nor for a "
    f"percentile with fewer than {TAIL_SAMPLES} samples beyond it (p95: {min_samples(95)}, p99: "
    f"{min_samples(99)}); ITL is resampled by decode step; region and kernel totals are per decode step; where "
    "the time moved judges a region by its own time in the steps no wait for a core landed in (p5 over the steps, "
    "at the before side's machine speed)"
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
    "time moved by its p5 over the steps (the steps no wait for a core landed in)"
)


def method(n_a: int, n_b: int, floor: NoiseFloor | None = None) -> str:
    """The method text printed with every diff: the within-run bootstrap for one run a side, else hierarchical;
    then the noise floor applied."""
    floors = f"; noise floor: {floor.describe()}" if floor is not None else ""
    if n_a == 1 and n_b == 1:
        return (
            f"{METHOD} (one run a side: the interval sees the noise inside each run, not the drift between "
            f"runs; compare groups of runs, e.g. roseprof nsys --repeat 3, to have it){floors}"
        )
    text = HIERARCHICAL_METHOD.format(n_a=n_a, n_b=n_b, resamples=RESAMPLES, conf=int(CONFIDENCE * 100))
    return text + floors


# What the gate looks at unless --metric says otherwise: the user-facing step and ITL medians and means. Region and
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
]


# A region's own time per step, judged where the machine did not interrupt it. On a shared CPU the process waits
# for a core at random moments and whichever region runs then absorbs the wait: the mean own time per step carries
# those waits (a region's moved by tens of percent between two runs of the same code), the steps the waits missed
# do not. The 5th percentile: 16 of the demo's 319 steps a run, still 40 a side's needs (stats.min_samples).
LOW_OWN_Q = 5
LOW_OWN = "regions.{}.self_p5_ns"


def _low_own(run: RunData, name: str) -> float:
    """A run's LOW_OWN_Q-th percentile of a region's own time per step (machine_speed's statistic for it)."""
    return float(np.percentile(run.step_self[name][0], LOW_OWN_Q))


@dataclass
class Sample:
    """One metric's sample on one side, per run: the values (with the cluster of each value, when values move
    together), and how the statistic becomes the metric: (stat(pooled values) + sum of offsets) / sum of scales
    over the runs (a total per decode step: offset = time outside the steps, scale = the run's steps)."""

    values: list[np.ndarray]  # per run: [N_r]
    clusters: list[np.ndarray] | None = None  # per run: [N_r]
    offsets: list[float] | None = None
    scales: list[float] | None = None

    def value(self, stat) -> float:
        off = sum(self.offsets) if self.offsets else 0.0
        scale = sum(self.scales) if self.scales else 1.0
        return (float(stat(np.concatenate(self.values))) + off) / scale

    def units(self) -> int:
        if self.clusters is not None:
            return sum(len(np.unique(c)) for c in self.clusters)
        return sum(len(v) for v in self.values)

    def resampled(self, stat, rng) -> np.ndarray:
        """The metric over RESAMPLES bootstrap resamples: the within-run bootstrap for one run, the hierarchical
        one (runs, then steps inside each) for several."""
        if len(self.values) == 1:
            v, off = self.values[0], self.offsets[0] if self.offsets else 0.0
            scale = self.scales[0] if self.scales else 1.0
            if self.clusters is not None:
                return (clustered(v, self.clusters[0], stat, rng) + off) / scale
            return (resampled(v, stat, rng) + off) / scale
        return hierarchical(self.values, stat, rng, self.clusters, self.offsets, self.scales)

    def spread(self, stat, rng) -> tuple:
        """(estimate, resamples, within-run resamples, runs): what stats.group_interval needs of a side."""
        full = self.resampled(stat, rng)
        if len(self.values) == 1:
            return self.value(stat), full, full, 1
        within = hierarchical(
            self.values, stat, rng, self.clusters, self.offsets, self.scales, runs_fixed=True
        )
        return self.value(stat), full, within, len(self.values)


def _sample(values, clusters=None, offsets=None, scales=None) -> Sample:
    """A Sample, leaving out runs with no values where nothing else (offset, scale) needs them."""
    if offsets is None and scales is None:
        keep = [i for i, v in enumerate(values) if len(v)]
        values = [values[i] for i in keep]
        clusters = None if clusters is None else [clusters[i] for i in keep]
    return Sample(list(values), clusters, offsets, scales)


def _metric(name: str, a: Sample, b: Sample, stat, rng=None, lower_is_better=True, q: float | None = None):
    """A statistic of samples a and b (Samples, or one run's values as arrays), with its bootstrap interval; `q`
    is the percentile the statistic is (None: a mean, median or sum), which sets how many samples it needs."""
    a, b = (x if isinstance(x, Sample) else Sample([np.asarray(x, dtype=np.float64)]) for x in (a, b))
    va, vb = a.value(stat), b.value(stat)
    entry = {
        "name": name,
        "a": va,
        "b": vb,
        "delta_pct": None,
        "ci_low_pct": None,
        "ci_high_pct": None,
        "significant": False,
        "lower_is_better": lower_is_better,
        "n_a": sum(len(v) for v in a.values),
        "n_b": sum(len(v) for v in b.values),
        "min_samples": min_samples(q),
    }
    if a.clusters is not None and b.clusters is not None:
        entry["units_a"], entry["units_b"] = a.units(), b.units()  # what was resampled (decode steps)
    if va == 0:
        return entry
    entry["delta_pct"] = 100.0 * (vb - va) / va
    if rng is not None and min(a.units(), b.units()) >= entry["min_samples"]:
        if len(a.values) == 1 and len(b.values) == 1:
            ci = interval(a.resampled(stat, rng), b.resampled(stat, rng))
        else:
            ci = group_interval(a.spread(stat, rng), b.spread(stat, rng))
        if ci is not None:
            entry["ci_low_pct"], entry["ci_high_pct"] = ci
            entry["significant"] = bool(ci[0] > 0 or ci[1] < 0)
    return entry


def _group(x: RunData | list[RunData]) -> list[RunData]:
    return [x] if isinstance(x, RunData) else list(x)


def _common(dicts: list[dict]) -> list[str]:
    return sorted(set.intersection(*(set(d) for d in dicts)))


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
    the noise floor (default: floor_for, the runs' device's calibrated floors for this many runs a side)."""
    ga, gb = _group(a), _group(b)
    runs = ga + gb
    rng = np.random.default_rng(seed)
    metrics: list[dict] = []
    stats = {"p50": (pct(50), 50), "p99": (pct(99), 99), "mean": (np.mean, None)}
    if all(r.step_dur is not None for r in runs):
        for label, sel in (("", None), ("rollover.", True), ("normal.", False)):

            def masks(g, sel=sel):
                return [np.ones(len(r.step_dur), bool) if sel is None else r.step_roll == sel for r in g]

            ma, mb = masks(ga), masks(gb)
            sa = _sample([r.step_dur[m] for r, m in zip(ga, ma)])
            sb = _sample([r.step_dur[m] for r, m in zip(gb, mb)])
            if sa.values and sb.values:
                for sname, (fn, q) in stats.items():
                    metrics.append(_metric(f"steps.{label}{sname}_ns", sa, sb, fn, rng=rng, q=q))
            if label and any(m.any() for m in ma) and any(m.any() for m in mb):
                # Where inside the step the time went, for rollover and normal steps apart (mean ns per step).
                for name in _common([r.step_regions for r in runs]):
                    ra = _sample([r.step_regions[name][m] for r, m in zip(ga, ma)])
                    rb = _sample([r.step_regions[name][m] for r, m in zip(gb, mb)])
                    metrics.append(_metric(f"steps.{label}regions.{name}", ra, rb, np.mean, rng=rng))
                    metrics.append(_metric(f"steps.{label}regions_p50.{name}", ra, rb, np.median, rng=rng))
    if all(r.itl is not None for r in runs):
        clustered_itl = all(r.itl_step is not None for r in runs)
        for label, sel in (("", None), ("at_rollover.", True), ("elsewhere.", False)):

            def itl_sample(g, sel=sel):
                ms = [np.ones(len(r.itl), bool) if sel is None else r.itl_roll == sel for r in g]
                # Tokens of one decode step share that step's latency: resample steps, not tokens.
                cl = [r.itl_step[m] for r, m in zip(g, ms)] if clustered_itl else None
                return _sample([r.itl[m] for r, m in zip(g, ms)], cl)

            sa, sb = itl_sample(ga), itl_sample(gb)
            if sa.values and sb.values:
                for q in (50, 95, 99):
                    metrics.append(_metric(f"itl.{label}p{q}_ms", sa, sb, pct(q), rng=rng, q=q))
    # Totals per decode step (run totals when a run has no steps).
    per_step = all(r.steps for r in runs)

    def norm(g):
        return [float(r.steps) if per_step else 1.0 for r in g]

    speeds = machine_speed.speed_factors(ga, gb) if per_step else None
    speed_a, speed_b = speeds or ([1.0] * len(ga), [1.0] * len(gb))
    # The waits that LOW_OWN leaves out are a shared CPU's. On a GPU the host's regions are microseconds of launch
    # and waiting for the device, whose p5 is the clock's grain (`h2d_block_tables`: 0.6 µs), and the mean is
    # what the H100 calibration measured: GPU diffs judge the mean.
    cpu_only = noise_floor.device_of(any(r.kernel_durations for r in runs)) == "cpu"
    low_speeds = (
        machine_speed.speed_factors(ga, gb, _low_own, machine_speed.LOW_MIN_SHARE)
        if per_step and cpu_only
        else None
    )
    low_a, low_b = low_speeds or ([1.0] * len(ga), [1.0] * len(gb))

    for name in _common([r.region_durations for r in runs]):
        if per_step and all(name in r.step_regions for r in runs):
            # Inside the decode step: the per-step time is the sample, resampled over steps.
            def side(g, name=name):
                outside = [float(r.region_durations[name].sum() - r.step_regions[name].sum()) for r in g]
                return Sample([r.step_regions[name] for r in g], None, outside, norm(g))
        else:

            def side(g, name=name):
                return Sample([r.region_durations[name] for r in g], None, None, norm(g))

        metrics.append(_metric(f"regions.{name}.total_ns", side(ga), side(gb), np.sum, rng))
        ca = sum(len(r.region_durations[name]) for r in ga) / sum(norm(ga))
        cb = sum(len(r.region_durations[name]) for r in gb) / sum(norm(gb))
        metrics.append({"name": f"regions.{name}.count", "a": ca, "b": cb, **_plain_delta(ca, cb)})
        if per_step and all(name in r.step_self for r in runs):
            # Own time (the region less its children) per step at the before side's machine speed, resampled over
            # steps: where the time moved (machine_speed.py).
            def own(g, speed, name=name):
                scales = [s * n for s, n in zip(speed, norm(g))]
                return Sample(
                    [r.step_self[name][0] for r in g], None, [r.step_self[name][1] for r in g], scales
                )

            m = _metric(f"regions.{name}.self_ns", own(ga, speed_a), own(gb, speed_b), np.sum, rng)
            m["speed_normalised"] = speeds is not None
            metrics.append(m)

            # The same in the steps no wait landed in (LOW_OWN_Q-th percentile over the steps): what "where the
            # time moved" judges a region by (verdict._changes, docs/BENCHMARKS.md, session 7).
            def low(g, speed, name=name):
                return Sample([r.step_self[name][0] / s for r, s in zip(g, speed)])

            if cpu_only:
                q = LOW_OWN_Q
                m = _metric(LOW_OWN.format(name), low(ga, low_a), low(gb, low_b), pct(q), rng, q=q)
                m["speed_normalised"] = low_speeds is not None
                metrics.append(m)
        elif all(name in r.region_self for r in runs):
            sa = sum(r.region_self[name] for r in ga) / sum(norm(ga))
            sb = sum(r.region_self[name] for r in gb) / sum(norm(gb))
            metrics.append({"name": f"regions.{name}.self_ns", "a": sa, "b": sb, **_plain_delta(sa, sb)})
    for name in _common([r.kernel_durations for r in runs]):
        if per_step and all(name in r.kernel_steps for r in runs):

            def side(g, name=name):
                return Sample(
                    [r.kernel_steps[name][0] for r in g], None, [r.kernel_steps[name][1] for r in g], norm(g)
                )
        else:

            def side(g, name=name):
                return Sample([r.kernel_durations[name] for r in g], None, None, norm(g))

        metrics.append(_metric(f"kernels.{name}.total_ns", side(ga), side(gb), np.sum, rng))
    # TTFT: one sample per request, resampled over requests (and runs) like the other percentiles.
    ttft_ok = all(r.ttft is not None and len(r.ttft) for r in ga + gb)
    if ttft_ok:
        for q in (50, 99):
            sa, sb = _sample([r.ttft for r in ga]), _sample([r.ttft for r in gb])
            metrics.append(_metric(f"requests.ttft.p{q}_ms", sa, sb, pct(q), rng=rng, q=q))
    # Numbers with no sample behind them (the benchmark's own request figures): the mean over the runs.
    for key, q, lower in [(k, q, True) for k in ("ttft", "tpot") for q in ("p50_ms", "p99_ms")] + [
        (None, "throughput_tok_s", False)
    ]:
        if key == "ttft" and ttft_ok:
            continue
        va, vb = _request_figure(ga, key, q), _request_figure(gb, key, q)
        if va and vb:
            label = f"requests.{key}.{q}" if key else f"requests.{q}"
            metrics.append(
                {"name": label, "a": va, "b": vb, **_plain_delta(va, vb), "lower_is_better": lower}
            )
    # Metrics of analysis sections that diff does not know by name (analysis/sections/: diff_metrics).
    for section in SECTIONS:
        for m in section.diff_metrics(ga, gb) if section.diff_metrics is not None else ():
            # A summary figure per side, no sample behind it: a plain change, never called significant alone.
            lower = m.get("lower_is_better", True)
            metrics.append(
                {
                    "name": m["name"],
                    "a": m["a"],
                    "b": m["b"],
                    **_plain_delta(m["a"], m["b"]),
                    "lower_is_better": lower,
                }
            )
    for m in metrics:
        m["per_step"] = bool(per_step) and m["name"].startswith(("regions.", "kernels."))
    return noise_floor.apply(metrics, floor or floor_for(ga, gb))


def _request_figure(g: list[RunData], key: str | None, q: str) -> float | None:
    values = []
    for r in g:
        req = r.summary.get("requests") or {}
        if key is None:
            values.append(req.get(q))
        else:
            values.append((req.get(key) or {}).get(q) if (req.get(key) or {}).get("count") else None)
    return float(np.mean(values)) if values and all(values) else None


def _plain_delta(a: float, b: float) -> dict:
    """A change with no sample to resample (a single summary number): never called significant."""
    return {
        "delta_pct": 100.0 * (b - a) / a if a else None,
        "ci_low_pct": None,
        "ci_high_pct": None,
        "significant": False,
        "lower_is_better": True,
    }


def gate(metrics: list[dict], threshold_pct: float | None, patterns: list[str] | None) -> list[dict]:
    """Mark and return the regressions: a gated metric that grew (or, higher-is-better, fell) by more than
    threshold_pct and beyond its noise floor (`significant`: the interval clears the floor)."""
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
    new = {k: sum(float(r.kernel_durations.get(k, np.zeros(0)).sum()) for r in gb) / nb for k in in_b - in_a}
    gone = {k: sum(float(r.kernel_durations.get(k, np.zeros(0)).sum()) for r in ga) / na for k in in_a - in_b}
    return {
        "new": sorted(new.items(), key=lambda kv: -kv[1]),
        "vanished": sorted(gone.items(), key=lambda kv: -kv[1]),
    }


def rank(metrics: list[dict]) -> list[dict]:
    """Largest significant changes first, then the rest by size of change."""
    return sorted(metrics, key=lambda m: (not m["significant"], -abs(m["delta_pct"] or 0)))
