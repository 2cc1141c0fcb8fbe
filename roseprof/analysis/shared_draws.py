"""The within-run bootstrap of a diff's metrics, drawn once a side (one run a side): every metric that resamples
one side's n units (its decode steps) reads its statistic off the same resamples, instead of drawing and gathering
n values RESAMPLES times of its own. On the 1M-kernel run (12,780 steps, 112 such metrics) the draws and gathers
were 18.6 of the diff's 25 s (docs/BENCHMARKS.md, issue 43, session 20).

A side's resamples are drawn as counts, [B, n]: how often each unit was drawn in each resample (n uniform draws a
resample, as bootstrap.resampled draws them). Then

- a sum or a mean over the resample is counts @ values: one matrix product for all those metrics together;
- a percentile is two order statistics of the resample, read through ranks: drawing unit i is, for a metric, drawing
  the i-th smallest of its values (the draws are uniform, so any fixed order of the units is as good as another),
  so the resample's k-th smallest value is the sorted values at the place where the counts' running sum first
  exceeds k. One running sum serves every percentile metric of the side, each reads B values off it.

Each metric's resamples are a bootstrap of its own values, exactly; metrics of one side share their draws (a sum and
a percentile through different orders), which no interval looks at: each is of one metric, before against after.
The sides draw apart (before first), so that before and after are independent, as their runs are."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

import numpy as np

from roseprof.analysis.bootstrap import interval, resamples_for
from roseprof.analysis.stats import Percentile

# Cells of the [chunk, n] counts drawn at once: bounds the draw's memory (a few arrays of this many int64s).
CHUNK_CELLS = 2_000_000
# Metrics over fewer units a side than this resample on their own, each with its own draws from the diff's
# generator in the order the families ask (diff_metric.set_interval), as every diff did before: there a metric's
# bootstrap is 1,000 x n cells (at most 2M, tens of ms), and every run of the usual size (each fixture's at most
# 1,152 units, the CPU demo's 319 steps) keeps its intervals to the bit. From here on the shared draws: a long run's
# intervals then move by the resampling's own noise against the per-metric draws, not by method.
FROM_UNITS = 2_000


def kind_of(stat) -> str | float | None:
    """What `stat` is to the shared draws: "sum", "mean", a percentile's q, or None (another statistic, which
    resamples on its own: bootstrap.resampled)."""
    if stat is np.sum:
        return "sum"
    if stat is np.mean:
        return "mean"
    if stat is np.median:
        return 50.0
    if isinstance(stat, Percentile):
        return float(stat.q)
    return None


@dataclass
class Job:
    """One metric waiting for its interval: its entry (filled in by `fill`), each side's one run's values [n] and
    how its statistic becomes the metric ((stat + offset) / scale), and the statistic's kind (`kind_of`)."""

    entry: dict
    values: tuple[np.ndarray, np.ndarray]  # before, after: [n_a], [n_b]
    offsets: tuple[float, float]
    scales: tuple[float, float]
    kind: str | float


def fill(jobs: list[Job], rng: np.random.Generator) -> None:
    """Each job's interval (bootstrap.interval of its before and after resamples) into its entry, as diff_metric.metric
    sets it: `ci_low_pct`, `ci_high_pct`, `significant` (before the noise floor)."""
    if not jobs:
        return
    try:  # imported only where a long run's intervals are drawn (tens of ms a command otherwise)
        from threadpoolctl import threadpool_limits
    except ImportError:  # a machine given only some wheels (scripts/gpu_wheels.sh): BLAS as it is, more CPU
        threadpool_limits = None
    resamples = [{}, {}]  # per side: id(job) -> [B] the metric over the side's resamples
    # One BLAS thread for the sums' matrix products: OpenBLAS's second thread halved no product's time and spun
    # after each, doubling the CPU time of the draws on a 2-core machine (0.4 against 0.2 s a side, 1M kernels).
    with threadpool_limits(limits=1, user_api="blas") if threadpool_limits else contextlib.nullcontext():
        for side in (0, 1):
            by_n: dict[int, list[Job]] = {}
            for job in jobs:
                by_n.setdefault(len(job.values[side]), []).append(job)
            for n, group in by_n.items():
                values, kinds = [j.values[side] for j in group], [j.kind for j in group]
                stats = statistics(values, kinds, rng, resamples_for(n))
                for j, col in zip(group, stats.T):
                    resamples[side][id(j)] = (col + j.offsets[side]) / j.scales[side]
    for job in jobs:
        ci = interval(resamples[0][id(job)], resamples[1][id(job)])
        if ci is not None:
            job.entry["ci_low_pct"], job.entry["ci_high_pct"] = ci
            job.entry["significant"] = bool(ci[0] > 0 or ci[1] < 0)


def statistics(values: list[np.ndarray], kinds: list, rng: np.random.Generator, resamples: int) -> np.ndarray:
    """[resamples, M]: each of M metrics' statistic (`kind_of`) over the same `resamples` bootstrap resamples of
    their n units (values: M arrays [n], one a metric)."""
    n = len(values[0])
    out = np.empty((resamples, len(values)))
    linear = [j for j, k in enumerate(kinds) if k in ("sum", "mean")]
    pcts = [j for j, k in enumerate(kinds) if k not in ("sum", "mean")]
    table = np.stack([values[j] for j in linear], axis=1) if linear else None  # [n, L]
    if table is not None:
        table = table / np.array([n if kinds[j] == "mean" else 1 for j in linear], dtype=np.float64)
    ranked = [np.sort(values[j]) for j in pcts]  # [n] each: a percentile metric's values, ascending
    # numpy's linear percentile: (n - 1) q / 100 into the sorted sample, lo and lo + 1 interpolated (stats.Percentile)
    places = [_place(n, kinds[j]) for j in pcts]
    ranks = sorted({r for lo, t, _ in places for r in (lo, lo + 1) if r < n})
    chunk = max(1, min(resamples, CHUNK_CELLS // n))
    buffers = _Buffers(chunk, n, bool(linear), bool(pcts))  # reused by every chunk: no fresh pages each time
    for lo in range(0, resamples, chunk):
        hi = min(resamples, lo + chunk)
        counts = draw_counts(rng, hi - lo, n, buffers.counts)  # [C, n]
        if table is not None:
            weights = buffers.weights[: hi - lo]
            np.copyto(weights, counts)
            out[lo:hi, linear] = weights @ table
        if pcts:
            # [C, K] each rank's place in ascending order
            at = order_statistics(counts, ranks, buffers.running)
            for j, v, (r, t, top) in zip(pcts, ranked, places):
                a = v[at[:, ranks.index(r)]]
                if top:  # the percentile is the largest value
                    out[lo:hi, j] = a
                    continue
                b = v[at[:, ranks.index(r + 1)]]
                d = b - a
                out[lo:hi, j] = np.where(t >= 0.5, b - d * (1 - t), a + d * t)  # numpy's _lerp, to the bit
    return out


class _Buffers:
    """The [chunk, n] arrays one chunk of resamples needs, allocated once a side: a fresh 16 MB array a chunk cost
    its page faults again each time (a third of the draws' time on the 1M-kernel run)."""

    def __init__(self, chunk: int, n: int, linear: bool, pcts: bool):
        self.counts = np.empty((chunk, n), dtype=np.int64)
        self.weights = np.empty((chunk, n), dtype=np.float64) if linear else None
        self.running = np.empty((chunk, n), dtype=np.int64) if pcts else None


def _place(n: int, q: float) -> tuple[int, float, bool]:
    """(lo, t, top) of numpy's linear percentile q of n sorted values: index h = (n - 1) q / 100, lo = floor(h),
    t = h - lo; top when h reaches the last value (stats.Percentile.weighted's arithmetic)."""
    h = (n - 1) * float(np.true_divide(q, 100))
    if h >= n - 1:
        return n - 1, 0.0, True
    lo = int(np.floor(h))
    return lo, h - lo, False


def draw_counts(rng: np.random.Generator, rows: int, n: int, out: np.ndarray | None = None) -> np.ndarray:
    """[rows, n] int64: how often each of n units is drawn in each of `rows` resamples of n uniform draws (into the
    first rows of `out` where given)."""
    idx = rng.integers(0, n, size=(rows, n), dtype=np.int32)  # [rows, n] (int32: drawn faster)
    counts = np.empty((rows, n), dtype=np.int64) if out is None else out[:rows]
    # a row at a time: its n counts stay in cache (twice as fast as one bincount of every row)
    for row, drawn in zip(counts, idx):
        row[:] = np.bincount(drawn, minlength=n)
    return counts


def order_statistics(counts: np.ndarray, ranks: list[int], out: np.ndarray | None = None) -> np.ndarray:
    """[rows, K]: for each resample (a row of counts [rows, n]) and each 0-based rank k, the unit its k-th smallest
    draw is: the first unit where the running sum of the counts exceeds k (`out`: room for the running sums)."""
    rows, n = counts.shape
    # [rows, n], each row ends at n
    running = np.cumsum(counts, axis=1, out=None if out is None else out[:rows])
    # Each row shifted by row * (n + 1): one ascending array, so one searchsorted finds every row's places.
    shift = (np.arange(rows, dtype=np.int64) * (n + 1))[:, None]  # [rows, 1]
    running += shift
    targets = shift + np.asarray(ranks, dtype=np.int64)  # [rows, K]
    found = np.searchsorted(running.ravel(), targets.ravel(), side="right").reshape(rows, len(ranks))
    return found - (np.arange(rows, dtype=np.int64) * n)[:, None]
