"""The statistics every analysis shares: percentiles (numpy's linear interpolation, as `nsys stats` medians),
per-key grouping, and bootstrap resampling (plain, and clustered when samples move together)."""

from __future__ import annotations

import math

import numpy as np

RESAMPLES = 1000
CONFIDENCE = 0.95
# Below this many steps (or instances) per run no interval is given, so nothing is called significant.
MIN_SAMPLES = 5
# A high percentile is only tested when at least this many samples per run lie beyond it: the p99 of 8 rollover
# steps is just the slowest of them, one sample, and two captures' slowest steps differ by chance on a busy
# machine. So p95 needs 40 samples per run and p99 needs 200 (min_samples).
TAIL_SAMPLES = 2


def min_samples(q: float | None = None) -> int:
    """Samples (or resampled units, e.g. decode steps for ITL) per run that a statistic needs before it gets an
    interval: MIN_SAMPLES for a mean or median; for the q-th percentile, enough that TAIL_SAMPLES lie beyond it."""
    if q is None or q <= 50:
        return MIN_SAMPLES
    return max(MIN_SAMPLES, math.ceil(TAIL_SAMPLES * 100 / (100 - q) - 1e-9))


def pct(q):
    """The q-th percentile as a statistic that also works along an axis (for resampled matrices)."""
    return lambda x, axis=None: np.percentile(x, q, axis=axis)


def ns_stats(values) -> dict:
    """count, p50, p99 and mean of nanosecond values (None when there are none)."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) == 0:
        return {"count": 0, "p50_ns": None, "p99_ns": None, "mean_ns": None}
    return {
        "count": int(len(v)),
        "p50_ns": float(np.percentile(v, 50)),
        "p99_ns": float(np.percentile(v, 99)),
        "mean_ns": float(v.mean()),
    }


def ms_stats(values) -> dict:
    """count, p50, p95, p99 and mean of millisecond values (None when there are none)."""
    v = np.asarray(values, dtype=np.float64)
    if len(v) == 0:
        return {"count": 0, "p50_ms": None, "p95_ms": None, "p99_ms": None, "mean_ms": None}
    return {
        "count": int(len(v)),
        "p50_ms": float(np.percentile(v, 50)),
        "p95_ms": float(np.percentile(v, 95)),
        "p99_ms": float(np.percentile(v, 99)),
        "mean_ms": float(v.mean()),
    }


def group_percentiles(keys: np.ndarray, values: np.ndarray, qs=(50, 99)) -> dict[int, list[float]]:
    """Percentiles of `values` per distinct key."""
    out: dict[int, list[float]] = {}
    if len(keys) == 0:
        return out
    order = np.lexsort((values, keys))
    k, v = keys[order], values[order]
    bounds = np.flatnonzero(np.diff(k)) + 1
    for chunk_k, chunk_v in zip(np.split(k, bounds), np.split(v, bounds)):
        out[int(chunk_k[0])] = [float(np.percentile(chunk_v, q)) for q in qs]
    return out


def groups(keys: np.ndarray, values: np.ndarray) -> tuple[list, list[np.ndarray]]:
    """Split values (already sorted by key) into one float array per distinct key: (keys, arrays)."""
    if len(keys) == 0:
        return [], []
    bounds = np.flatnonzero(np.diff(keys)) + 1
    starts = np.concatenate([[0], bounds])
    return keys[starts].tolist(), np.split(values.astype(np.float64), bounds)


def resampled(values: np.ndarray, stat, rng: np.random.Generator) -> np.ndarray:
    """The statistic over RESAMPLES bootstrap resamples of `values`, in chunks to bound memory."""
    n = len(values)
    # Fewer resamples for very large samples: their intervals are narrow anyway, and time stays bounded.
    resamples = RESAMPLES if n <= 20_000 else 200
    out = np.empty(resamples)
    chunk = max(1, min(resamples, 4_000_000 // max(n, 1)))
    for lo in range(0, resamples, chunk):
        hi = min(resamples, lo + chunk)
        idx = rng.integers(0, n, size=(hi - lo, n), dtype=np.int64 if n > 2**31 else np.int32)
        out[lo:hi] = stat(values[idx], axis=1)
    return out


def clustered(values: np.ndarray, clusters: np.ndarray, stat, rng: np.random.Generator) -> np.ndarray:
    """Bootstrap over clusters (e.g. the tokens of one decode step move together): resample clusters."""
    order = np.argsort(clusters, kind="stable")
    v, c = values[order], clusters[order]
    bounds = np.flatnonzero(np.diff(c)) + 1
    parts = np.split(v, bounds)
    n = len(parts)
    out = np.empty(RESAMPLES)
    for i in range(RESAMPLES):
        pick = rng.integers(0, n, size=n)
        out[i] = stat(np.concatenate([parts[j] for j in pick]))
    return out


def interval(ra: np.ndarray, rb: np.ndarray) -> tuple[float, float] | None:
    """The CONFIDENCE percentile interval of the relative change 100 (b - a) / a over paired resamples."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = 100.0 * (rb - ra) / ra
    rel = rel[np.isfinite(rel)]
    if not len(rel):
        return None
    tail = 100 * (1 - CONFIDENCE) / 2
    lo, hi = np.percentile(rel, [tail, 100 - tail])
    return float(lo), float(hi)
