"""The `collectives` summary's tables, from the matched collectives (analysis/collectives.py): the arrival spread,
one row per rank, the collectives by the region they were issued from and by their place in the step, and the
rank x step lateness the dashboard draws."""

from __future__ import annotations

import numpy as np

from roseprof.analysis.collectives import Instances, Matched, Participants
from roseprof.analysis.stats import dense_ids
from roseprof.analysis.stragglers import per_step_lateness


def spread_stats(m: Matched) -> dict | None:
    """The arrival spread's p50, p99 and max over the matched collectives (None where none matched)."""
    if not len(m.spread):
        return None
    s = m.spread.astype(np.float64)
    return {
        "p50_ns": float(np.percentile(s, 50)),
        "p99_ns": float(np.percentile(s, 99)),
        "max_ns": float(s.max()),
    }


def rank_rows(inst: Instances, parts: Participants, m: Matched) -> list[dict]:
    """One row per rank: its collectives (all, and inside decode steps), their time and exposed time (total, and per
    decode step p50), its decode step p50, how often it was last, its lateness p50/p99 over the matched ones."""
    out = []
    for p in range(len(parts.label)):
        mine = inst.who == p
        in_step = mine & (inst.step >= 0)
        # step indices are dense: counted, not sorted (stats.dense_ids)
        steps, per_step = dense_ids(inst.step[in_step], int(inst.step.max()) + 1 if in_step.any() else 0)
        exposed_steps = np.bincount(per_step.ravel(), weights=inst.exposed[in_step]) if len(steps) else []
        durations = (parts.step_end[p] - parts.step_start[p]).astype(np.float64)
        late = m.lateness[:, p].astype(np.float64) if len(m.step) and len(parts.label) > 1 else np.zeros(0)
        out.append(
            {
                "rank": parts.rank[p],
                "pid": parts.pid[p],
                "device": parts.device[p],
                "count": int(mine.sum()),
                "in_steps": int(in_step.sum()),
                "total_ns": int((inst.end - inst.arrival)[mine].sum()),
                "exposed_ns": int(inst.exposed[mine].sum()),
                "exposed_per_step_p50_ns": _p(exposed_steps, 50),
                "step_p50_ns": _p(durations, 50),
                "last_count": int(((m.last == p) & (m.spread > 0)).sum()) if len(parts.label) > 1 else 0,
                "late_p50_ns": _p(late, 50),
                "late_p99_ns": _p(late, 99),
            }
        )
    return out


def by_region(trace, inst: Instances) -> list[dict]:
    """One row per (collective, region it was issued from), all ranks together: count, time, exposed time."""
    key = np.stack([inst.name, inst.site], axis=1)
    uniq, inverse = np.unique(key, axis=0, return_inverse=True)
    inverse = inverse.ravel()
    total = np.bincount(inverse, weights=inst.end - inst.arrival)
    exposed = np.bincount(inverse, weights=inst.exposed)
    count = np.bincount(inverse)
    rows = [
        {
            "name": trace.names[n],
            "region": trace.names[r] if r >= 0 else None,
            "count": int(count[j]),
            "total_ns": int(total[j]),
            "exposed_ns": int(exposed[j]),
        }
        for j, (n, r) in enumerate(uniq.tolist())
    ]
    rows.sort(key=lambda x: -x["total_ns"])
    return rows


def by_order(trace, inst: Instances, parts: Participants, m: Matched) -> list[dict]:
    """Per collective of the step (its place n), over the matched steps: where it was issued (rank 0's region),
    the arrival spread p50/p99 and the rank most often last there."""
    if len(parts.label) < 2 or not len(m.step):
        return []
    out = []
    for n in np.unique(m.order).tolist():
        at = m.order == n
        site = np.bincount(np.maximum(inst.site[m.row[at, 0]], 0)).argmax()
        last = np.bincount(m.last[at & (m.spread > 0)], minlength=len(parts.label))
        p = int(last.argmax())
        out.append(
            {
                "order": n,
                "region": trace.names[int(site)] if (inst.site[m.row[at, 0]] >= 0).any() else None,
                "count": int(at.sum()),
                "spread_p50_ns": float(np.percentile(m.spread[at], 50)),
                "spread_p99_ns": float(np.percentile(m.spread[at], 99)),
                "last_rank": parts.rank[p] if last[p] else None,
                "last_pct": 100.0 * float(last[p]) / float(at.sum()),
            }
        )
    return out


def _p(values, q: float) -> float | None:
    return float(np.percentile(values, q)) if len(values) else None


def heatmap(parts: Participants, m: Matched) -> dict | None:
    """Rank x step: each rank's lateness summed over the step's collectives (ms), for the run dashboard."""
    if len(parts.label) < 2 or not len(m.step):
        return None
    steps, late = per_step_lateness(m, len(parts.label))
    return {
        "steps": steps.tolist(),
        "ranks": list(parts.rank),
        "late_ms": np.round(late / 1e6, 4).tolist(),  # [P][S]
    }
