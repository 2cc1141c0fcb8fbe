"""The statistics every analysis shares: percentiles (numpy's linear interpolation, as `nsys stats` medians, also
of counted values), per-key grouping, and interned ids factorised by counting instead of sorting. The bootstrap
that diff resamples with is bootstrap.py's."""

from __future__ import annotations

import math

import numpy as np


class Percentile:
    """The q-th percentile as a statistic: of values, along an axis (resampled matrices), or of values that each
    stand for several equal samples (`weighted`)."""

    def __init__(self, q: float) -> None:
        self.q = q

    def __call__(self, x, axis=None):
        return np.percentile(x, self.q, axis=axis)

    def weighted(self, values: np.ndarray, counts: np.ndarray) -> float:
        """np.percentile(np.repeat(values, counts), q) without the repeat, to the bit: numpy's linear method
        (index (n - 1) q / 100 into the sorted sample, its fraction interpolated the way numpy's _lerp does)."""
        order = np.argsort(values, kind="stable")
        v = values[order]  # [U] ascending
        ends = np.cumsum(counts[order])  # [U]: how many samples are <= each value
        n = int(ends[-1])
        h = (n - 1) * float(np.true_divide(self.q, 100))
        if h >= n - 1:
            return float(v[-1])
        lo = math.floor(h)
        t = h - lo
        a, b = v[np.searchsorted(ends, [lo, lo + 1], side="right")]  # the samples of rank lo and lo + 1
        d = b - a
        return float(b - d * (1 - t)) if t >= 0.5 else float(a + d * t)


def pct(q) -> Percentile:
    """The q-th percentile as a statistic (`Percentile`)."""
    return Percentile(q)


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
    k, v = by_key_then_value(keys, values)
    starts = np.flatnonzero(np.concatenate([[True], k[1:] != k[:-1]]))  # [G] each key's first sorted value
    sizes = np.diff(np.append(starts, len(k)))  # [G]
    # Every group's percentile at once, by numpy's linear method on its sorted values (index (n - 1) q / 100, the
    # two values around it interpolated as numpy's _lerp does: the same floats as np.percentile of each group). A
    # call per group was 3 s of the 1M-kernel import (its kernels' thousands of (name, region) rows).
    columns = []
    for q in qs:
        h = (sizes - 1) * float(np.true_divide(q, 100))  # [G]
        lo = np.floor(h).astype(np.int64)
        t = h - lo
        a = v[starts + lo]
        b = v[starts + np.minimum(lo + 1, sizes - 1)]
        d = b - a
        columns.append(np.where(t >= 0.5, b - d * (1 - t), a + d * t).tolist())
    for j, key in enumerate(k[starts].tolist()):
        out[int(key)] = [col[j] for col in columns]
    return out


def by_key_then_value(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(keys, float64 values) sorted by key, then value: what np.lexsort((values, keys)) orders. Non-negative
    integer keys and values (group indices, durations in ns) are sorted as one int64 code a pair, key * (the largest
    value + 1) + value: one np.sort (0.03 s for a million, against lexsort's 0.3 s); anything else by lexsort."""
    if (
        keys.dtype.kind in "iu"
        and values.dtype.kind in "iu"
        and keys.min() >= 0
        and values.min() >= 0
        and (int(keys.max()) + 1) * (int(values.max()) + 1) < 1 << 62
    ):
        base = np.int64(int(values.max()) + 1)
        code = np.sort(keys.astype(np.int64) * base + values.astype(np.int64))  # [n]
        k = code // base
        return k, (code - k * base).astype(np.float64)
    order = np.lexsort((values, keys))
    return keys[order], np.asarray(values, dtype=np.float64)[order]


def stable_order(ids: np.ndarray) -> np.ndarray:
    """np.argsort(ids, kind="stable") of integer ids: the same permutation, by numpy's radix sort where they fit 16
    bits unsigned (interned names: a million kernels' in 0.014 against 0.047 s)."""
    if len(ids) and ids.dtype.kind in "iu" and 0 <= ids.min() and ids.max() < 1 << 16:
        return np.argsort(ids.astype(np.uint16), kind="stable")
    return np.argsort(ids, kind="stable")


def dense_ids(ids: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(ids, return_inverse=True) for ids in [0, n) (interned name ids, range indices): the distinct ids
    in ascending order and each one's index among them, by a count over the n ids instead of a sort."""
    present = np.bincount(ids, minlength=n) > 0
    return np.flatnonzero(present), (np.cumsum(present) - 1)[ids]


def unique_rows(columns: list[np.ndarray], n_values: int) -> tuple[np.ndarray, np.ndarray]:
    """np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True) for columns of ids in [-1, n_values):
    the rows in the same (lexicographic) order and each row's index among them, by one int64 code a row (its
    columns' indices among their distinct values as digits) instead of numpy's row-wise sort, several times slower."""
    base = n_values + 1
    if not len(columns[0]) or base ** len(columns) >= 1 << 62:
        uniq, inverse = np.unique(np.stack(columns, axis=1), axis=0, return_inverse=True)
        return uniq, inverse.ravel()
    # Each column's values first counted to their index among its distinct values (order kept), so that a row's
    # code lives in the product of the distinct counts: usually small enough to be counted too (dense_ids), with no
    # sort of the rows at all (a million kernels' rows: a sort with inverse was 0.1 s).
    distinct, index = zip(*(dense_ids(np.asarray(col, dtype=np.int64) + 1, base) for col in columns))
    sizes = [len(d) for d in distinct]
    code = np.zeros(len(columns[0]), dtype=np.int64)
    for i, size in zip(index, sizes):
        code = code * size + i
    space = int(np.prod(sizes, dtype=object))
    if space <= 4 * len(code) + (1 << 20):
        codes, inverse = dense_ids(code, space)
    else:
        codes, inverse = np.unique(code, return_inverse=True)
    digits = []
    for d, size in zip(distinct[::-1], sizes[::-1]):
        codes, digit = np.divmod(codes, size)
        digits.append(d[digit] - 1)
    return np.stack(digits[::-1], axis=1), inverse.ravel()


def groups(keys: np.ndarray, values: np.ndarray) -> tuple[list, list[np.ndarray]]:
    """Split values (already sorted by key) into one float array per distinct key: (keys, arrays)."""
    if len(keys) == 0:
        return [], []
    bounds = np.flatnonzero(np.diff(keys)) + 1
    starts = np.concatenate([[0], bounds])
    return keys[starts].tolist(), np.split(values.astype(np.float64), bounds)
