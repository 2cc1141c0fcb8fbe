"""The rank that arrives late: how often, by how much, where it spent the extra time, and the ITL spikes it caused.

A collective ends for everyone when the last rank arrives, so the last rank's lateness (its arrival minus the
first one's) is time every other rank spent waiting. The straggler is the rank whose lateness adds up to the most
over the matched collectives (collectives.py); it is named with how often it was last and the p50/p99 of its
lateness when it was.

Where the extra time went: for each collective the straggler was last at, each rank's window runs from the end
of its previous collective (in the step or before it) to its arrival at this one. On the CPU (gloo), the window's
time on the thread that issued the collective is split by the innermost region open at each instant (own time,
children apart; "(outside any region)" for time no region covers). On a GPU the window is the GPU's: its kernel
time is split by the region each kernel ran for ("GPU work"), and the time the GPU idled in it (no kernel running:
it waited for the host to launch the next one) by the host region open then on the thread that issued the
collective ("GPU idle": a late host, e.g. a rank whose host sleeps in roseinfer.layer.mlp while its GPU has nothing
queued). The (region, kind) whose time on the straggler exceeds the mean of the other ranks' the most, summed over
those collectives, is where the straggler spent it.

ITL spikes caused by one rank: a decode step that holds a spike token (itl.py's spikes), where the step's last
rank arrived late by at least half the spike's excess over the median ITL, summed over the step's collectives.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from roseprof.analysis.collectives import Instances, Matched, Participants
from roseprof.model import KERNEL, Trace

OUTSIDE = "(outside any region)"
EXPLAINS = 0.5  # a rank's lateness explains a spike when it is at least this share of the spike's excess
LISTED = 12
# The late windows split by region, at most this many (evenly spaced over the run): each costs a few lookups per
# rank in Python, and a long run's thousands of late collectives name the same region.
MAX_WINDOWS = 2000


# A straggler is clear when its share of all lateness is at least this (%): half of it, and 1.5x an even share
# (2 ranks: 75%), and it is last at that share of the collectives too. Below, ranks take turns being last (noise),
# and the latest one is named as such, not blamed. The second condition is for lateness that a few collectives hold
# (a rank late now and then by a lot): on the 2-H200 torch capture (tests/data) rank 0 held 89% of the lateness while last
# at 15% of the collectives, with a spread p50 of 0.0 ms; that is spikes (spikes_by_rank), not a slow rank.
def clear_share_pct(n_ranks: int) -> float:
    return max(50.0, 150.0 / n_ranks)


@dataclass
class Segments:
    """Pieces of a timeline [K], each labelled by a region (names index, -1 none), sorted by start."""

    start: np.ndarray
    end: np.ndarray
    name: np.ndarray

    @cached_property
    def reach(self) -> np.ndarray:
        """[K] the latest end among the pieces up to each one: those before the first piece reaching past t all
        end by t (pieces may overlap: kernels of several streams)."""
        return np.maximum.accumulate(self.end) if len(self.end) else self.end


@dataclass
class Busy:
    """A GPU's busy time as disjoint intervals [U] sorted by start, each with the busy ns before it."""

    start: np.ndarray
    end: np.ndarray
    before: np.ndarray  # [U] busy ns of the intervals before each

    def until(self, t: np.ndarray) -> np.ndarray:
        """[N] busy ns up to each time in `t` [N]."""
        k = np.searchsorted(self.start, t, side="right") - 1  # the last interval starting by t
        kk = np.maximum(k, 0)
        inside = np.clip(t - self.start[kk], 0, self.end[kk] - self.start[kk]) if len(self.start) else 0
        return (
            np.where(k >= 0, self.before[kk] + inside, 0) if len(self.start) else np.zeros(len(t), np.int64)
        )

    def idle(self, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
        """[N] ns of [lo, hi) in which nothing ran."""
        return (hi - lo) - (self.until(hi) - self.until(lo))


def busy_union(seg: Segments) -> Busy:
    """The union of a device's kernels (which may overlap across streams) as disjoint intervals."""
    if not len(seg.start):
        z = np.zeros(0, np.int64)
        return Busy(z, z, z)
    # A new interval starts where a kernel starts after every earlier one has ended.
    new = np.ones(len(seg.start), dtype=bool)
    new[1:] = seg.start[1:] > seg.reach[:-1]
    first = np.flatnonzero(new)
    last = np.append(first[1:], len(seg.start)) - 1
    start, end = seg.start[first], seg.reach[last]
    before = np.concatenate([[0], np.cumsum(end - start)[:-1]]).astype(np.int64)
    return Busy(start, end, before)


def idle_by_host_region(busy: Busy, host: Segments, lo: int, hi: int) -> dict[int, int]:
    """{names index: ns of [lo, hi) in which the GPU idled while that region was the host thread's innermost};
    -1 for idle time no host region covers."""
    a = np.searchsorted(host.reach, lo, side="right")
    b = np.searchsorted(host.start, hi, side="left")
    s = np.maximum(host.start[a:b], lo)
    e = np.maximum(np.minimum(host.end[a:b], hi), s)
    idle = busy.idle(s, e)
    out: dict[int, int] = {}
    for n, ns in zip(host.name[a:b].tolist(), idle.tolist()):
        if ns > 0:
            out[n] = out.get(n, 0) + int(ns)
    whole = int(busy.idle(np.array([lo]), np.array([hi]))[0])
    out[-1] = max(whole - sum(v for k, v in out.items() if k >= 0), 0)
    return out


def own_segments(trace: Trace, tree, tid: int) -> Segments:
    """Thread `tid`'s time cut into pieces, each labelled by the innermost range open then (a range's own time: its
    span less its children's)."""
    r = trace.ranges
    rows = np.flatnonzero(r.tid == tid)  # contiguous, parents before children (Ranges.sort)
    cursor = {int(i): int(r.start[i]) for i in rows.tolist()}  # how far each range's own time is laid out
    seg: list[tuple[int, int, int]] = []
    for i in rows.tolist():
        p = int(tree.parent[i])
        if p >= 0:
            if r.start[i] > cursor[p]:
                seg.append((cursor[p], int(r.start[i]), int(r.name[p])))
            cursor[p] = max(cursor[p], int(r.end[i]))
    for i in rows.tolist():
        if r.end[i] > cursor[i]:
            seg.append((cursor[i], int(r.end[i]), int(r.name[i])))
    if not seg:
        return Segments(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int64))
    a = np.asarray(sorted(seg), dtype=np.int64)  # [K, 3]
    return Segments(a[:, 0], a[:, 1], a[:, 2])


def gpu_segments(trace: Trace, device: int, owner: np.ndarray, leave_out: np.ndarray) -> Segments:
    """The kernels on GPU `device` other than `leave_out` (the collectives), each labelled by the region it ran for
    (`owner` [G]: capture-time region of a replayed kernel, else launching region; -1 none). Kernels of several
    streams may overlap."""
    o = trace.ops
    keep = (o.kind == KERNEL) & (o.device == device)
    keep[leave_out] = False
    rows = np.flatnonzero(keep)  # GpuOps are sorted by start
    return Segments(o.start[rows], o.end[rows], owner[rows])


def own_time(seg: Segments, lo: int, hi: int) -> dict[int, int]:
    """{names index: ns of its pieces inside [lo, hi)}; -1 for the rest of the window (no region's, or idle)."""
    a = np.searchsorted(seg.reach, lo, side="right")  # pieces before `a` all end by lo
    b = np.searchsorted(seg.start, hi, side="left")
    part = np.clip(np.minimum(seg.end[a:b], hi) - np.maximum(seg.start[a:b], lo), 0, None)
    names = seg.name[a:b]
    out: dict[int, int] = {}
    for n, ns in zip(names.tolist(), part.tolist()):
        if ns > 0:
            out[n] = out.get(n, 0) + ns
    out[-1] = max(hi - lo - sum(v for k, v in out.items() if k >= 0), 0)
    return out


def window_starts(inst: Instances, m: Matched) -> np.ndarray:
    """[M, P] where each rank's window before each matched collective begins: the end of the rank's previous
    collective in time (in the step or before it: the time between two collectives is what the rank did in
    between), the collective's own arrival for a rank's first (an empty window)."""
    C = len(inst.who)
    by_time = np.lexsort((inst.arrival, inst.who))  # [C] per rank, in arrival order
    prev_end = np.full(C, -1, dtype=np.int64)
    same = inst.who[by_time[1:]] == inst.who[by_time[:-1]]
    prev_end[by_time[1:][same]] = inst.end[by_time[:-1][same]]
    rows = m.row  # [M, P]
    arrival = inst.arrival[rows]
    return np.where(prev_end[rows] >= 0, np.minimum(prev_end[rows], arrival), arrival)


def straggler(
    trace: Trace, tree, inst: Instances, parts: Participants, m: Matched, owner=None
) -> dict | None:
    """Summary of the straggler, or None where fewer than two ranks or no collective was matched. `owner` [G]: the
    region each GPU op ran for (a GPU run's windows are split by the kernels in them, not by host regions: the host
    runs ahead of its GPU)."""
    P = len(parts.pid)
    if P < 2 or not len(m.step) or not m.spread.any():
        return None
    total_late = m.lateness.sum(axis=0)  # [P]
    s = int(np.argmax(total_late))
    share = 100.0 * float(total_late[s]) / float(max(total_late.sum(), 1))
    late_at = np.flatnonzero((m.last == s) & (m.spread > 0))
    spread_when_last = m.spread[late_at]
    windows = (
        late_at[np.linspace(0, len(late_at) - 1, MAX_WINDOWS).astype(np.int64)]
        if len(late_at) > MAX_WINDOWS
        else late_at
    )
    regions = _where_late(trace, tree, inst, parts, m, s, windows, owner)
    orders = np.bincount(m.order[late_at]) if len(late_at) else np.zeros(0, np.int64)
    site_ids = inst.site[m.row[late_at, s]]
    site_ids = site_ids[site_ids >= 0]
    site = int(np.bincount(site_ids).argmax()) if len(site_ids) else -1
    return {
        "rank": parts.rank[s],
        "pid": parts.pid[s],
        "last_count": int(len(late_at)),
        "last_pct": 100.0 * len(late_at) / len(m.step),
        "late_share_pct": share,
        "clear": share >= clear_share_pct(P) and 100.0 * len(late_at) / len(m.step) >= clear_share_pct(P),
        "late_p50_ns": float(np.percentile(spread_when_last, 50)) if len(late_at) else None,
        "late_p99_ns": float(np.percentile(spread_when_last, 99)) if len(late_at) else None,
        "late_total_ns": int(total_late[s]),
        # The collective (by its place in the step, and the region it was issued from) it was most often late at.
        "most_late_at": int(np.argmax(orders)) if len(orders) else None,
        "most_late_site": trace.names[site] if site >= 0 else None,
        "region": regions[0]["region"] if regions else None,
        "region_kind": regions[0]["kind"] if regions else None,  # GPU work | GPU idle (a late host) | host
        "where": where_words(regions[0]) if regions else None,
        "windows": int(len(windows)),  # the late collectives whose windows `regions` sums over
        "regions": regions[:5],
    }


# How a (region, kind) key's time is said: on a GPU, kernel time (GPU work) or the GPU idle while the host was in
# the region; on the CPU, the host thread's own time.
GPU_WORK, GPU_IDLE, HOST = "GPU work", "GPU idle", "host"


def where_words(row: dict) -> str:
    """A (region, kind) row in words, as the views say it."""
    if row["kind"] == GPU_IDLE:
        return f"the GPU idled while the host was in {row['region']}"
    if row["kind"] == GPU_WORK:
        return f"GPU work in {row['region']}"
    return f"host time in {row['region']}"


def _where_late(trace, tree, inst, parts, m, s: int, late_at: np.ndarray, owner) -> list[dict]:
    """[{region, kind, extra_ns, extra_p50_ns}] largest first: time on the straggler `s` over the others' mean in
    the windows before the collectives it was last at, per (region, kind): on the CPU, own time of the host regions
    on the thread that issued the collective; on a GPU, kernel time per region on the rank's GPU and the GPU's idle
    time per host region open then on the issuing thread."""
    if not len(late_at):
        return []
    P = len(parts.pid)
    lo = window_starts(inst, m)
    segs: dict[tuple, Segments] = {}
    busy: dict[int, Busy] = {}

    def host(tid: int) -> Segments:
        if ("cpu", tid) not in segs:
            segs[("cpu", tid)] = own_segments(trace, tree, tid)
        return segs[("cpu", tid)]

    def gpu(device: int) -> Segments:
        if ("gpu", device) not in segs:
            segs[("gpu", device)] = gpu_segments(trace, device, owner, inst.source)
            busy[device] = busy_union(segs[("gpu", device)])
        return segs[("gpu", device)]

    extra: dict[tuple[int, str], list[float]] = {}
    for j in late_at.tolist():
        own: list[dict[tuple[int, str], int]] = []
        for p in range(P):
            row = m.row[j, p]
            w0, w1 = int(lo[j, p]), int(inst.arrival[row])
            if inst.kind == "gpu":
                work = own_time(gpu(parts.device[p]), w0, w1)
                work.pop(-1)  # the rest of the window: the GPU's idle time, split by host region below
                idle = idle_by_host_region(busy[parts.device[p]], host(int(inst.tid[row])), w0, w1)
                own.append(
                    {
                        **{(n, GPU_WORK): v for n, v in work.items()},
                        **{(n, GPU_IDLE): v for n, v in idle.items()},
                    }
                )
            else:
                own.append({(n, HOST): v for n, v in own_time(host(int(inst.tid[row])), w0, w1).items()})
        for key in set().union(*own):
            others = [own[p].get(key, 0) for p in range(P) if p != s]
            extra.setdefault(key, []).append(own[s].get(key, 0) - float(np.mean(others)))
    rows = [
        {
            "region": trace.names[n] if n >= 0 else OUTSIDE,
            "kind": kind,
            "extra_ns": float(np.sum(v)),
            "extra_p50_ns": float(np.percentile(v, 50)),
        }
        for (n, kind), v in extra.items()
    ]
    rows.sort(key=lambda x: -x["extra_ns"])
    return [x for x in rows if x["extra_ns"] > 0]


def per_step_lateness(m: Matched, n_participants: int) -> tuple[np.ndarray, np.ndarray]:
    """(steps [S], [P, S] each rank's lateness summed over the step's matched collectives, ns)."""
    steps = m.steps
    out = np.zeros((n_participants, len(steps)), dtype=np.int64)
    k = np.searchsorted(steps, m.step)
    for p in range(n_participants):
        np.add.at(out[p], k, m.lateness[:, p])
    return steps, out


def spikes_by_rank(
    itl_series: list | None, spikes: dict | None, parts: Participants, m: Matched
) -> dict | None:
    """The spike steps whose last rank's lateness explains the spike: counts per rank and the largest ones."""
    if not itl_series or not spikes or not len(m.step) or len(parts.pid) < 2:
        return None
    median = float(spikes.get("median_ms") or 0.0)
    worst: dict[int, float] = {}  # spike step -> its largest spike ITL (ms)
    for req in itl_series:
        for step, itl, cause in zip(req.get("step", []), req["itl_ms"], req.get("spike_cause") or []):
            if cause is not None and step >= 0:
                worst[step] = max(worst.get(step, 0.0), itl)
    steps, late = per_step_lateness(m, len(parts.pid))
    explained, counts = [], [0] * len(parts.pid)
    for step, itl in sorted(worst.items()):
        k = int(np.searchsorted(steps, step))
        if k >= len(steps) or steps[k] != step:
            continue
        p = int(np.argmax(late[:, k]))
        late_ms = late[p, k] / 1e6
        if late_ms >= EXPLAINS * (itl - median) > 0:
            counts[p] += 1
            explained.append({"step": int(step), "itl_ms": itl, "rank": parts.rank[p], "late_ms": late_ms})
    explained.sort(key=lambda x: -x["itl_ms"])
    return {
        "spike_steps": len(worst),
        "explained_steps": len(explained),
        "by_rank": [{"rank": parts.rank[p], "steps": counts[p]} for p in range(len(parts.pid)) if counts[p]],
        "listed": explained[:LISTED],
    }
