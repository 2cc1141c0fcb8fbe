"""The bootstrap diff draws its intervals from: resampling plain, clustered when samples move together (a decode
step's tokens), and hierarchical over a group of runs; a step's equal samples counted once (`compress`,
`stat_of`); the intervals read off the resamples; and how many samples a statistic needs before it gets one.
Percentiles and per-key grouping are stats.py's."""

from __future__ import annotations

import math

import numpy as np

RESAMPLES = 1000
# One run's sample of more than LARGE_SAMPLE values (a long GPU run's tokens) gets LARGE_RESAMPLES: each
# resample's statistic costs a pass over the whole sample, and such a run's interval is narrow anyway. Not a group
# of runs: there the drift between runs sets the width, and 200 resamples would move its ends by a few points.
LARGE_SAMPLE = 20_000
LARGE_RESAMPLES = 200
CONFIDENCE = 0.95
# Below this many steps (or instances) per run no interval is given, so nothing is called significant.
MIN_SAMPLES = 5
# A high percentile is only tested when at least this many samples per run lie beyond it: the p99 of 8 rollover
# steps is just the slowest of them, one sample, and two captures' slowest steps differ by chance on a busy
# machine. So p95 needs 40 samples per run and p99 needs 200 (min_samples).
TAIL_SAMPLES = 2


def min_samples(q: float | None = None) -> int:
    """Samples (or resampled units, e.g. decode steps for ITL) per run that a statistic needs before it gets an
    interval: MIN_SAMPLES for a mean or median; for the q-th percentile, enough that TAIL_SAMPLES lie beyond it
    (below it for a low percentile: the p5 of 20 steps is the fastest one)."""
    if q is None or q == 50:
        return MIN_SAMPLES
    tail = 100 - q if q > 50 else q
    return max(MIN_SAMPLES, math.ceil(TAIL_SAMPLES * 100 / tail - 1e-9))


def compress(values: np.ndarray, clusters: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(values, clusters, counts) [U] each: every distinct (cluster, value) pair once, with how often it occurs.
    The tokens of a decode step share the step's latency, so a step of a 512-sequence batch becomes one or two
    entries, and a bootstrap over steps (`clustered`, `hierarchical` with counts) draws the same clusters as over
    the tokens, with the same result, at the cost of the steps."""
    order = np.lexsort((values, clusters))
    v, c = values[order], clusters[order]
    starts = (
        np.flatnonzero(np.concatenate([[True], (v[1:] != v[:-1]) | (c[1:] != c[:-1])])) if len(v) else order
    )
    return v[starts], c[starts], np.diff(np.append(starts, len(v)))


def stat_of(stat, values: list[np.ndarray], counts: list[np.ndarray] | None = None) -> float:
    """The statistic of pooled values, each value `counts` samples where given: `Percentile.weighted`, or for a
    statistic with no weighted form (a mean) the samples the counts stand for."""
    if counts is None:
        return float(stat(np.concatenate(values)))
    if not hasattr(stat, "weighted"):
        return float(stat(np.repeat(np.concatenate(values), np.concatenate(counts))))
    return stat.weighted(np.concatenate(values), np.concatenate(counts))


def resamples_for(n: int) -> int:
    """How many resamples a bootstrap over a sample of n values draws."""
    return RESAMPLES if n <= LARGE_SAMPLE else LARGE_RESAMPLES


def resampled(values: np.ndarray, stat, rng: np.random.Generator) -> np.ndarray:
    """The statistic over RESAMPLES bootstrap resamples of `values`, in chunks to bound memory."""
    n = len(values)
    resamples = resamples_for(n)
    out = np.empty(resamples)
    chunk = max(1, min(resamples, 4_000_000 // max(n, 1)))
    for lo in range(0, resamples, chunk):
        hi = min(resamples, lo + chunk)
        idx = rng.integers(0, n, size=(hi - lo, n), dtype=np.int64 if n > 2**31 else np.int32)
        out[lo:hi] = stat(values[idx], axis=1)
    return out


def clustered(
    values: np.ndarray, clusters: np.ndarray, stat, rng: np.random.Generator, counts: np.ndarray | None = None
) -> np.ndarray:
    """Bootstrap over clusters (e.g. the tokens of one decode step move together): resample clusters. counts:
    how many samples each value stands for (`compress`; `stat_of`)."""
    order = np.argsort(clusters, kind="stable")
    v, c = values[order], clusters[order]
    bounds = np.flatnonzero(np.diff(c)) + 1
    parts = np.split(v, bounds)
    weights = None if counts is None else np.split(counts[order], bounds)
    n = len(parts)
    out = np.empty(resamples_for(len(values) if counts is None else int(counts.sum())))
    for i in range(len(out)):
        pick = rng.integers(0, n, size=n)
        out[i] = stat_of(
            stat, [parts[j] for j in pick], None if weights is None else [weights[j] for j in pick]
        )
    return out


def interval(ra: np.ndarray, rb: np.ndarray) -> tuple[float, float] | None:
    """The CONFIDENCE percentile interval of the relative change 100 (b - a) / a over paired resamples (the
    first k of each when one side drew fewer, resamples_for: they are independent, so any pairing is one)."""
    k = min(len(ra), len(rb))
    ra, rb = ra[:k], rb[:k]
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = 100.0 * (rb - ra) / ra
    rel = rel[np.isfinite(rel)]
    if not len(rel):
        return None
    tail = 100 * (1 - CONFIDENCE) / 2
    lo, hi = np.percentile(rel, [tail, 100 - tail])
    return float(lo), float(hi)


def hierarchical(
    runs: list[np.ndarray],
    stat,
    rng: np.random.Generator,
    clusters: list[np.ndarray] | None = None,
    offsets: np.ndarray | None = None,
    scales: np.ndarray | None = None,
    runs_fixed: bool = False,
    counts: list[np.ndarray] | None = None,
) -> np.ndarray:
    """A two-level bootstrap over a group of runs: RESAMPLES times, resample the runs with replacement, then the
    units inside each chosen run (its values, or its clusters when given: the tokens of one decode step move
    together), and take (stat(pooled resample) + the chosen runs' offsets) / the chosen runs' scales. counts (with
    clusters): how many samples each value stands for (`compress`; `stat_of`).

    The outer level puts the drift between runs (a shared machine's load, clocks, cache state) into the interval,
    which resampling the steps of one run cannot see. With one run it is the within-run bootstrap. runs_fixed:
    every run once, only the units inside them resampled (the within-run part of the spread, `group_interval`)."""
    n_runs = len(runs)
    assert counts is None or clusters is not None, "counts stand for a cluster's equal values (compress)"
    # Without scales the statistic is the metric (a percentile, a mean); with them, a total per scale unit.
    offsets = np.zeros(n_runs) if offsets is None else np.asarray(offsets, dtype=np.float64)  # [R]
    scales = None if scales is None else np.asarray(scales, dtype=np.float64)  # [R]
    lengths = {len(v) for v in runs}
    if clusters is None and len(lengths) == 1 and 0 not in lengths:
        return _hierarchical_equal(runs, stat, rng, offsets, scales, runs_fixed)
    # per run: (values sorted by cluster, their counts or None, cluster starts, cluster lengths), or (values, None,
    # None, None) without clusters
    parts = []
    for r, values in enumerate(runs):
        if clusters is None:
            parts.append((values, None, None, None))
            continue
        order = np.argsort(clusters[r], kind="stable")
        c = clusters[r][order]
        starts = np.flatnonzero(np.concatenate([[True], c[1:] != c[:-1]])) if len(c) else np.zeros(0, int)
        lengths = np.diff(np.append(starts, len(c)))
        parts.append((values[order], None if counts is None else counts[r][order], starts, lengths))
    out = np.empty(RESAMPLES)
    for i in range(RESAMPLES):
        # [R] runs, with replacement (or each once)
        pick = np.arange(n_runs) if runs_fixed else rng.integers(0, n_runs, size=n_runs)
        pooled, pooled_counts = [], None if counts is None else []
        for r in pick:
            values, weights, starts, lengths = parts[r]
            if starts is None:
                pooled.append(values[rng.integers(0, len(values), size=len(values))])
            else:
                chosen = rng.integers(0, len(starts), size=len(starts))  # clusters, with replacement
                lens = lengths[chosen]
                # Indices of every value of the chosen clusters, in one gather.
                idx = np.repeat(starts[chosen] - np.cumsum(lens) + lens, lens) + np.arange(lens.sum())
                pooled.append(values[idx])
                if weights is not None:
                    pooled_counts.append(weights[idx])
        scale = 1.0 if scales is None else scales[pick].sum()
        out[i] = (stat_of(stat, pooled, pooled_counts) + offsets[pick].sum()) / scale
    return out


# Student's t 97.5% quantiles by degrees of freedom (CONFIDENCE = 0.95), for `expansion` and `t975`.
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}
_T975.update({11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 20: 2.086, 25: 2.060, 30: 2.042})
_Z975 = 1.959964


def expansion(n_runs: int) -> float:
    """How much to widen a bootstrap distribution over n_runs runs about its point estimate (the expanded
    percentile interval, Hesterberg 2015: sqrt(n / (n - 1)) * t(n - 1) / z). A bootstrap over a few units is too
    narrow: it sees their spread as the spread of the population (a factor (n - 1) / n in variance) and a normal
    tail where a t with n - 1 degrees of freedom belongs. Simulated, 3 runs a side and 5% drift between runs:
    significant at the nominal 5% level in 19% of same-code pairs without it, 1% with it (docs/BENCHMARKS.md).
    The diff used it until session 6 (now `group_interval`); scripts/gate_calibration.py compares the two."""
    if n_runs < 2:
        return 1.0
    df = n_runs - 1
    t = _T975[max(k for k in _T975 if k <= df)] if df <= 30 else _Z975  # a table gap: the next lower df
    return float(np.sqrt(n_runs / df) * t / _Z975)


def t975(df: float) -> float:
    """Student's t 97.5% quantile for df degrees of freedom (a table gap or a fraction: the next lower df, which
    is wider); the normal one beyond 30."""
    if df > 30:
        return _Z975
    return _T975[max(k for k in _T975 if k <= max(df, 1))]


def group_interval(a: tuple, b: tuple) -> tuple[float, float] | None:
    """The CONFIDENCE interval of the relative change 100 (b - a) / a when a side is a group of runs; a and b are
    (estimate, full resamples, within-run resamples, runs) of each side (`hierarchical`, and with runs_fixed).

    On the log scale, each side's variance is split in two: within its runs (the steps: resamples with every run
    kept once) and between its runs (the rest), the latter corrected for the bootstrap's (n - 1) / n. The
    interval is log(b / a) +- t * sqrt(V_a + V_b), with Welch-Satterthwaite degrees of freedom from the between
    parts (n_a - 1 + n_b - 1 for equal spreads; the within parts rest on hundreds of steps). A percentile interval
    over 3 runs is lumpy (27 draws of whole runs), too narrow in its tails, and its cure, widening each side by
    t(n - 1), over-corrects: it called 1% of same-code pairs significant at the nominal 5% and hid a +47% region
    change behind [+0.7, +105] (docs/BENCHMARKS.md, session 6)."""
    total = 0.0
    df_den = 0.0
    logs = []
    for centre, full, within, n_runs in (a, b):
        if not centre > 0:
            return None
        floor = centre * 1e-3  # a time or a count: a resample of 0 is "much smaller", not minus infinity
        lf = np.log(np.maximum(full, floor))
        lw = np.log(np.maximum(within, floor))
        var_within = float(np.var(lw))
        var_between = 0.0
        if n_runs > 1:
            var_between = max(float(np.var(lf)) - var_within, 0.0) * n_runs / (n_runs - 1)
            df_den += var_between**2 / (n_runs - 1)
        total += var_between + var_within
        logs.append(np.log(centre))
    df = total**2 / df_den if df_den > 0 else math.inf
    half = t975(df) * math.sqrt(total)
    diff = logs[1] - logs[0]
    return 100.0 * math.expm1(diff - half), 100.0 * math.expm1(diff + half)


def _hierarchical_equal(runs, stat, rng, offsets, scales, runs_fixed=False) -> np.ndarray:
    """`hierarchical` for runs of one length n (the usual case: one workload, one step count), vectorised: every
    resample pools R x n values, so a chunk of resamples is one [chunk, R * n] matrix."""
    n_runs, n = len(runs), len(runs[0])
    flat = np.concatenate(runs)  # [R * n]
    resamples = RESAMPLES
    out = np.empty(resamples)
    chunk = max(1, min(resamples, 4_000_000 // (n_runs * n)))
    for lo in range(0, resamples, chunk):
        hi = min(resamples, lo + chunk)
        if runs_fixed:
            pick = np.broadcast_to(np.arange(n_runs), (hi - lo, n_runs))  # [C, R]
        else:
            pick = rng.integers(0, n_runs, size=(hi - lo, n_runs))  # [C, R]
        idx = pick[:, :, None] * n + rng.integers(0, n, size=(hi - lo, n_runs, n))  # [C, R, n]
        scale = 1.0 if scales is None else scales[pick].sum(axis=1)
        out[lo:hi] = (stat(flat[idx.reshape(hi - lo, -1)], axis=1) + offsets[pick].sum(axis=1)) / scale
    return out
