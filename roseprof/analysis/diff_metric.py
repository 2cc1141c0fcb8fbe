"""One diff metric: a statistic of the before and after sides' samples with its bootstrap interval, and `Sides`,
what an analysis section's diff metrics are computed from (analysis/sections/: `diff_samples`, `diff_metrics`).

The statistics are bootstrap.py's; the method text and the gate are diff.py's, which asks the sections for their
metrics (diff.compare) and marks each against the noise floor."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from roseprof.analysis import machine_speed, shared_draws
from roseprof.analysis.bootstrap import (
    clustered,
    group_interval,
    hierarchical,
    interval,
    min_samples,
    resampled,
    stat_of,
)
from roseprof.analysis.bootstrap import compress as stats_compress
from roseprof.analysis.run_data import RunData

# A region's own time per step, judged where the machine did not interrupt it. On a shared CPU the process waits
# for a core at random moments and whichever region runs then absorbs the wait: the mean own time per step carries
# those waits (a region's moved by tens of percent between two runs of the same code), the steps the waits missed
# do not. The 5th percentile: 16 of the demo's 319 steps a run, still 40 a side's needs (bootstrap.min_samples).
LOW_OWN_Q = 5
LOW_OWN = "regions.{}.self_p5_ns"


# A region's own thread CPU time per step (the step log's, version 3), which no wait for a core is in: what "where
# the time moved" judges a CPU region by when every run has it (verdict._changes). Its p5 over the steps at the
# before side's machine speed, as for the wall time: under load the CPU time of the same code grows too (caches
# refilled after other processes ran), in the mean most (the planted change: +18-28% of kv.append_token's mean
# CPU time with two competing processes, -4 to +3% with six; of its p5, +61-63% and +14-32%), and normalised for
# the machine's speed the p5's between-run spread fell from 9-15% to 2-7% (docs/BENCHMARKS.md, session 8).
CPU_OWN = "regions.{}.cpu_own_ns"
CPU_OWN_LOW = "regions.{}.cpu_own_p5_ns"
# The same at the runs' own speed. The normalisation's model (a busier machine slows every region alike) is only
# half true here: the Python-bound regions slow together while the BLAS-bound ones (lm_head, mlp) barely move, so
# against a group whose Python ran 25% slower the normalised lm_head reads 20% "faster" and the raw kv.append_token
# 30% "slower" (docs/BENCHMARKS.md, session 8, acc5). A region is called changed only when the raw figure moved
# the same way (its interval excludes 0; verdict._agrees).
CPU_OWN_LOW_RAW = "regions.{}.cpu_own_p5_raw_ns"


def low_cpu(run, name: str) -> float:
    """A run's LOW_OWN_Q-th percentile of a region's own CPU time per step (machine_speed's statistic for it)."""
    return float(np.percentile(run.step_cpu[name], LOW_OWN_Q))


def low_own(run, name: str) -> float:
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
    # per run [N_r]: how many samples each value stands for (`bootstrap.compress`: a step's tokens, one latency)
    counts: list[np.ndarray] | None = None

    def value(self, stat) -> float:
        off = sum(self.offsets) if self.offsets else 0.0
        scale = sum(self.scales) if self.scales else 1.0
        return (stat_of(stat, self.values, self.counts) + off) / scale

    def size(self) -> int:
        """Samples on this side (tokens, steps, instances)."""
        if self.counts is not None:
            return int(sum(c.sum() for c in self.counts))
        return sum(len(v) for v in self.values)

    def units(self) -> int:
        if self.clusters is not None:
            return sum(len(np.unique(c)) for c in self.clusters)
        return self.size()

    def resampled(self, stat, rng) -> np.ndarray:
        """The metric over RESAMPLES bootstrap resamples: the within-run bootstrap for one run, the hierarchical
        one (runs, then steps inside each) for several."""
        if len(self.values) == 1:
            v, off = self.values[0], self.offsets[0] if self.offsets else 0.0
            scale = self.scales[0] if self.scales else 1.0
            if self.clusters is not None:
                counts = None if self.counts is None else self.counts[0]
                return (clustered(v, self.clusters[0], stat, rng, counts) + off) / scale
            return (resampled(v, stat, rng) + off) / scale
        return hierarchical(
            self.values, stat, rng, self.clusters, self.offsets, self.scales, counts=self.counts
        )

    def spread(self, stat, rng) -> tuple:
        """(estimate, resamples, within-run resamples, runs): what bootstrap.group_interval needs of a side."""
        full = self.resampled(stat, rng)
        if len(self.values) == 1:
            return self.value(stat), full, full, 1
        within = hierarchical(
            self.values,
            stat,
            rng,
            self.clusters,
            self.offsets,
            self.scales,
            runs_fixed=True,
            counts=self.counts,
        )
        return self.value(stat), full, within, len(self.values)


def sample(values, clusters=None, offsets=None, scales=None, compress=False) -> Sample:
    """A Sample, leaving out runs with no values where nothing else (offset, scale) needs them. compress (with
    clusters): each run's equal values of a cluster kept once with their count (`bootstrap.compress`), which gives
    the same figures and intervals for the cost of the clusters (to the bit for a percentile, whose weighted form
    needs no repeat; `bootstrap.stat_of`)."""
    if offsets is None and scales is None:
        keep = [i for i, v in enumerate(values) if len(v)]
        values = [values[i] for i in keep]
        clusters = None if clusters is None else [clusters[i] for i in keep]
    if compress and clusters is not None:
        packed = [stats_compress(v, c) for v, c in zip(values, clusters)]
        return Sample([p[0] for p in packed], [p[1] for p in packed], offsets, scales, [p[2] for p in packed])
    return Sample(list(values), clusters, offsets, scales)


def metric(name: str, a: Sample, b: Sample, stat, rng=None, lower_is_better=True, q: float | None = None):
    """A statistic of samples a and b (Samples, or one run's values as arrays), with its bootstrap interval; `q`
    is the percentile the statistic is (None: a mean, median or sum), which sets how many samples it needs."""
    a, b = as_sample(a), as_sample(b)
    entry = _entry(name, a, b, stat, lower_is_better, q)
    if rng is not None and has_interval(entry, a, b):
        set_interval(entry, a, b, stat, rng)
    return entry


def as_sample(x) -> Sample:
    """A Sample, or one run's values as one."""
    return x if isinstance(x, Sample) else Sample([np.asarray(x, dtype=np.float64)])


def _entry(name: str, a: Sample, b: Sample, stat, lower_is_better: bool, q: float | None) -> dict:
    """A metric's entry with its figures and change, and no interval yet."""
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
        "n_a": a.size(),
        "n_b": b.size(),
        "min_samples": min_samples(q),
    }
    if a.clusters is not None and b.clusters is not None:
        entry["units_a"], entry["units_b"] = a.units(), b.units()  # what was resampled (decode steps)
    if va != 0:
        entry["delta_pct"] = 100.0 * (vb - va) / va
    return entry


def has_interval(entry: dict, a: Sample, b: Sample) -> bool:
    """Whether a metric gets an interval: a change to measure, and enough units a run on both sides."""
    return entry["a"] != 0 and min(a.units(), b.units()) >= entry["min_samples"]


def set_interval(entry: dict, a: Sample, b: Sample, stat, rng) -> None:
    """The metric's interval into its entry: the within-run bootstrap of each side for one run a side, else
    group_interval's."""
    if len(a.values) == 1 and len(b.values) == 1:
        ci = interval(a.resampled(stat, rng), b.resampled(stat, rng))
    else:
        ci = group_interval(a.spread(stat, rng), b.spread(stat, rng))
    if ci is not None:
        entry["ci_low_pct"], entry["ci_high_pct"] = ci
        entry["significant"] = bool(ci[0] > 0 or ci[1] < 0)


def plain_delta(a: float, b: float) -> dict:
    """A change with no sample to resample (a single summary number): never called significant."""
    return {
        "delta_pct": 100.0 * (b - a) / a if a else None,
        "ci_low_pct": None,
        "ci_high_pct": None,
        "significant": False,
        "lower_is_better": True,
    }


def figure(name: str, a: float, b: float, lower_is_better: bool = True) -> dict:
    """A metric of one summary figure per side (no sample behind it): a plain change, never significant alone."""
    return {"name": name, "a": a, "b": b, **plain_delta(a, b), "lower_is_better": lower_is_better}


def per_run(runs: list) -> list[float]:
    """The divisor of a total compared per run (`Sides.norm` gives the steps where totals are per step)."""
    return [1.0] * len(runs)


def outside_figure(name: str, a: list[float], b: list[float]) -> dict:
    """A region's or kernel's time outside the decode steps (warm-up, graph capture), the mean over each side's
    runs: once a run, so never spread over the steps. cuBLAS's one-time initialisation moved from the first c_attn
    into the lm_head's warm-up when the first linears left cuBLAS, and spread over the steps it read as "+236 µs
    per step" in a region whose steps had not changed (docs/BENCHMARKS.md, session 12)."""
    m = figure(name, sum(a) / len(a), sum(b) / len(b))
    m["per_step"] = False
    return m


def common(dicts: list[dict]) -> list[str]:
    """The keys every dict has, sorted: what every run of both sides can be compared on."""
    return sorted(set.intersection(*(set(d) for d in dicts)))


@dataclass
class Sides:
    """What a section's diff metrics are computed from: the runs before and after (one or more a side, each an
    analysis/samples.RunData with its summary), and the diff's one seeded generator: every interval draws from it
    in turn, so a diff is repeatable only when the metrics are asked for in one order (sections.DIFF_ORDER)."""

    before: list[RunData]
    after: list[RunData]
    rng: np.random.Generator
    # The metrics whose intervals are drawn together once every family has asked (`intervals`: shared_draws.py).
    # A family that makes Sides of its own (a sweep's rates) hands them this list.
    pending: list[shared_draws.Job] = field(default_factory=list)

    @property
    def runs(self) -> list[RunData]:
        return self.before + self.after

    @cached_property
    def per_step(self) -> bool:
        """Totals are compared per decode step where every run has steps (run totals otherwise)."""
        return all(r.steps for r in self.runs)

    def norm(self, runs: list[RunData]) -> list[float]:
        """What a total is divided by, per run: its decode steps, or 1 (a run total)."""
        return [float(r.steps) if self.per_step else 1.0 for r in runs]

    @cached_property
    def speeds(self) -> tuple[list[float], list[float]] | None:
        """Each run's machine speed factor (machine_speed.py), where totals are per step and the runs tell it."""
        return machine_speed.speed_factors(self.before, self.after) if self.per_step else None

    def metric(self, name: str, a: Sample, b: Sample, stat, lower_is_better=True, q: float | None = None):
        """`metric` with the diff's generator: a statistic of the two sides' samples, with its interval. One run
        a side of shared_draws.FROM_UNITS values or more, plain values and a sum, mean or percentile: the interval
        is drawn with the side's other such metrics by `intervals` (shared_draws.py), which the diff calls once
        every family has asked."""
        a, b = as_sample(a), as_sample(b)
        entry = _entry(name, a, b, stat, lower_is_better, q)
        if not has_interval(entry, a, b):
            return entry
        kind = shared_draws.kind_of(stat)
        one_run = len(a.values) == 1 and len(b.values) == 1 and a.clusters is None and b.clusters is None
        if kind is None or not one_run or max(len(a.values[0]), len(b.values[0])) < shared_draws.FROM_UNITS:
            set_interval(entry, a, b, stat, self.rng)
            return entry
        offsets = tuple(s.offsets[0] if s.offsets else 0.0 for s in (a, b))
        scales = tuple(s.scales[0] if s.scales else 1.0 for s in (a, b))
        self.pending.append(shared_draws.Job(entry, (a.values[0], b.values[0]), offsets, scales, kind))
        return entry

    def intervals(self) -> None:
        """The pending metrics' intervals, into their entries (shared_draws.fill)."""
        jobs, self.pending[:] = list(self.pending), []
        shared_draws.fill(jobs, self.rng)
