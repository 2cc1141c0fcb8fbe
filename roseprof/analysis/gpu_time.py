"""What each rank's GPU did in a decode step: computed, communicated with no compute beside it (exposed), or idled.

This is the scale story of tensor parallelism. Going from TP=1 to 2 to 4 halves each rank's weights, so compute per
step shrinks; each layer's all-reduces stay, so exposed communication per step holds or grows; and whatever the
host cannot launch in time shows as idle GPU time. A step that got no faster from TP=2 to TP=4 says which of the
three took the saving.

Per rank and decode step (the rank's own step ranges, joined to its step log), over the kernels the step launched
(a kernel belongs to the step whose range holds its launching call; a graph replay's kernels to the step that
replayed it):
    period   from the step's first kernel's start to the next step's first kernel's start: the GPU's step time
    busy     the union of the step's kernels (kernels of several streams, or under PDL, overlap)
    compute  the union of its kernels other than collectives
    exposed  busy less compute: communication with no compute kernel running beside it
    outside  kernels launched outside every decode step (a prefill between steps) that ran in the period
    idle     period less busy and outside: no kernel running, the GPU waited for the host (or another rank)
    gap      from the step's last kernel's end to the next step's first kernel's start (the part of idle between
             two steps), and in how many steps a copy (memcpy or memset) started there on the GPU and stream of
             that first kernel, which then started only after the copy (stream order), as each decode replay
             waited for the copy of the step before's tokens out (docs/BENCHMARKS.md, session 59)
Each is reported as its p50 over the rank's steps that have a next step (the medians need not add up exactly).
"""

from __future__ import annotations

import numpy as np

from roseprof.model import KERNEL, MEMCPY, MEMSET, Trace


def union_by_group(group: np.ndarray, start: np.ndarray, end: np.ndarray, n_groups: int) -> np.ndarray:
    """[n_groups] ns covered by the union of the intervals [start, end) of each group (group ids 0..n_groups-1)."""
    out = np.zeros(n_groups, dtype=np.int64)
    if not len(group):
        return out
    order = np.lexsort((start, group))
    g = group[order].astype(np.int64, copy=False)  # (int32 ids times the span below would wrap)
    s = start[order]
    e = np.maximum(end[order], s)
    base = int(s.min())
    span = int(e.max()) - base + 1
    times = None
    if span * n_groups >= 1 << 62:
        # Shifted by whole spans the times would pass int64 (a hostile trace's timestamps near the readers'
        # bound, several groups): the union runs on the times' ranks, whose order is theirs, and the lengths
        # come back in ns from the ranks.
        times = np.unique(np.concatenate((s, e)))
        s, e = np.searchsorted(times, s), np.searchsorted(times, e)
        base, span = 0, len(times)
    # Each group's times moved past the last one's, so one running maximum serves every group.
    s2 = (s - base) + g * span
    e2 = (e - base) + g * span
    reach = np.maximum.accumulate(e2)
    new = np.ones(len(s2), dtype=bool)
    new[1:] = s2[1:] > reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(s2)) - 1
    if times is None:
        length = reach[last] - s2[first]  # [segments] each merged segment's ns
    else:
        length = times[reach[last] - g[first] * span] - times[s[first]]
    # Every partial sum an integer that float64 holds exactly: bincount, not np.add.at (0.1 s a million kernels).
    # The total taken in float64, which does not wrap as int64 would past 2^63 (the rank path's lengths can add up
    # to that over several groups), and held below 2^52 so that its rounding cannot hide a total past 2^53.
    if float(length.sum(dtype=np.float64)) < 1 << 52:
        return np.bincount(g[first], weights=length, minlength=n_groups).astype(np.int64)
    np.add.at(out, g[first], length)
    return out


# Device ids spanning fewer values than this are counted, others sorted (a hostile trace's: Kineto takes a kernel's
# device from its pid where it has no device, and a count over 0xDEADBEEF's range took 27.8 GiB)
DEVICE_SPAN = 1 << 16
# busy_by_group takes one union per GPU up to this many GPUs, one sort of the (device, group) pairs beyond
FEW_GPUS = 64


def distinct_devices(device: np.ndarray) -> np.ndarray:
    """The distinct ids in `device`, ascending: by a count where they span fewer than DEVICE_SPAN values, else a
    sort."""
    if not len(device):
        return np.zeros(0, dtype=np.int64)
    low, high = int(device.min()), int(device.max())
    if high - low < DEVICE_SPAN:
        return np.flatnonzero(np.bincount(device - low)) + low
    ordered = np.sort(device)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]


def busy_by_group(
    group: np.ndarray, device: np.ndarray, start: np.ndarray, end: np.ndarray, n_groups: int
) -> np.ndarray:
    """[n_groups] ns each group kept a GPU busy, summed over its GPUs: the union of its intervals on each device
    (kernels of two streams of one GPU that run at once count once; two GPUs' kernels are two GPUs' time)."""
    out = np.zeros(n_groups, dtype=np.int64)
    if not len(device):
        return out
    present = distinct_devices(device)
    if len(present) <= FEW_GPUS:  # a handful of GPUs: one union each
        for d in present.tolist():
            on = device == d
            out += union_by_group(group[on], start[on], end[on], n_groups)
        return out
    # Many GPUs (a hostile trace's ids): one union per (device, group) run of a sort, summed into the groups
    order = np.lexsort((group, device))
    d, g = device[order], group[order]
    new = np.ones(len(order), dtype=bool)
    new[1:] = (d[1:] != d[:-1]) | (g[1:] != g[:-1])
    run = np.empty(len(order), dtype=np.int64)
    run[order] = np.cumsum(new) - 1  # [K] each kernel's (device, group) run
    per_run = union_by_group(run, start, end, int(new.sum()))
    return np.bincount(g[new], weights=per_run, minlength=n_groups).astype(np.int64)


def step_time(
    trace: Trace,
    mine: np.ndarray,  # [G] the rank's GPU ops
    collective: np.ndarray,  # [G] ops that are collectives
    step_start: np.ndarray,  # [S] the rank's decode steps, trace clock
    step_end: np.ndarray,
) -> dict | None:
    """{steps, period_p50_ns, busy_p50_ns, compute_p50_ns, exposed_p50_ns, outside_p50_ns, idle_p50_ns,
    gap_p50_ns, gap_copy_steps}, or None where the rank's steps launched no kernel (a CPU run, or steps with no GPU
    work)."""
    o = trace.ops
    k = np.flatnonzero((o.kind == KERNEL) & mine & (o.api_start >= 0))
    S = len(step_start)
    if not len(k) or S < 2:
        return None
    at = np.searchsorted(step_start, o.api_start[k], side="right") - 1
    inside = (at >= 0) & (o.api_start[k] <= step_end[np.maximum(at, 0)])
    out_k = k[~inside]  # launched between steps: a prefill, a capture
    k, at = k[inside], at[inside]
    if not len(k):
        return None
    busy = union_by_group(at, o.start[k], o.end[k], S)
    compute_rows = ~collective[k]
    compute = union_by_group(at[compute_rows], o.start[k][compute_rows], o.end[k][compute_rows], S)
    first = np.full(S, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first, at, o.start[k])
    last = np.full(S, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(last, at, o.end[k])
    has = first < np.iinfo(np.int64).max
    counted = np.flatnonzero(has[:-1] & has[1:])  # steps with kernels whose next step has kernels too
    if not len(counted):
        return None
    period = first[counted + 1] - first[counted]
    b = busy[counted]
    # The kernels launched outside the steps, by the period their start falls in (not the GPU waiting).
    outside = np.zeros(len(counted), dtype=np.int64)
    if len(out_k):
        starts = first[counted]
        p = np.searchsorted(starts, o.start[out_k], side="right") - 1
        ok = (p >= 0) & (o.start[out_k] < starts[np.maximum(p, 0)] + period[np.maximum(p, 0)])
        if ok.any():
            seg_end = np.minimum(o.end[out_k][ok], (starts + period)[p[ok]])
            outside = union_by_group(p[ok], o.start[out_k][ok], seg_end, len(counted))

    gap_lo, gap_hi = last[counted], np.maximum(first[counted + 1], last[counted])
    # Each step's first kernel, whose GPU and stream a copy in the gap before it must share to hold it back: one
    # that starts at the step's first start, of ties any (no sort: a lexsort took 0.18 s of a 1M-kernel import)
    lead = o.start[k] == first[at]
    first_op = np.full(S, -1, dtype=np.int64)
    first_op[at[lead]] = k[lead]
    nxt = first_op[counted + 1]
    copies = np.flatnonzero(((o.kind == MEMCPY) | (o.kind == MEMSET)) & mine)

    def p50(v) -> float:
        return float(np.median(v))

    return {
        "steps": int(len(counted)),
        "period_p50_ns": p50(period),
        "busy_p50_ns": p50(b),
        "compute_p50_ns": p50(compute[counted]),
        "exposed_p50_ns": p50(b - compute[counted]),
        "outside_p50_ns": p50(outside),
        "idle_p50_ns": p50(np.maximum(period - b - outside, 0)),
        "gap_p50_ns": p50(gap_hi - gap_lo),
        "gap_copy_steps": gaps_holding(
            gap_lo, gap_hi, o.device[nxt], o.stream[nxt], o.start[copies], o.device[copies], o.stream[copies]
        ),
    }


def gaps_holding(
    lo: np.ndarray,
    hi: np.ndarray,
    device: np.ndarray,
    stream: np.ndarray,
    at: np.ndarray,
    at_device: np.ndarray,
    at_stream: np.ndarray,
) -> int:
    """How many of the intervals [lo, hi) (one a step, each with the GPU and stream of the kernel that ends it)
    hold the start `at` of an op on that GPU and stream. The intervals are disjoint (a step's gap ends where the
    next step's kernels start), though under a trace's clock not always in order; overlapping ones (a hostile
    trace's) may be undercounted."""
    keep = hi > lo  # (an empty one holds nothing, and would share its start with the next)
    lo, hi, device, stream = lo[keep], hi[keep], device[keep], stream[keep]
    if not len(at) or not len(lo):
        return 0
    order = np.argsort(lo, kind="stable")
    lo, hi, device, stream = lo[order], hi[order], device[order], stream[order]
    j = np.searchsorted(lo, at, side="right") - 1  # [ops] the last interval starting at or before each
    jj = np.maximum(j, 0)
    inside = (j >= 0) & (at < hi[jj]) & (at_device == device[jj]) & (at_stream == stream[jj])
    held = np.zeros(len(lo), dtype=bool)
    held[j[inside]] = True
    return int(held.sum())
