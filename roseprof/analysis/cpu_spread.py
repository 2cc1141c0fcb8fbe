"""What a slower machine does to the regions' own CPU time: it moves them unevenly, and a region that moved no more
than the others did is the machine's, not the code's (issue 44).

A region's thread CPU time has no wait for a core in it, but a crowded core still inflates it: every switch back
to the engine refills its caches, and the Python-bound regions pay most (one core shared with 3-9 CPU burners, 14
crowded captures against their quiet ones: model.forward's raw CPU p5 0.92-1.43x, layer.layernorm's 0.88-1.43x,
lm_head's 0.99-1.32x; docs/BENCHMARKS.md, sessions 22-23). The diff compares each region's CPU time at the before
side's machine speed (the median of the regions' CPU ratios, machine_speed.speed_factors), so a region the crowding
inflated more than the median reads "slower" and one it inflated less reads "faster", by up to 27% there: beyond
the 15% floor, named and gated as the code's (a clean-clone CI run gated on one).

So where a side's machine was measured slower (decision.slower_machine, and a wall-clock figure beyond its floor
is the machine's), a region judged by its CPU time over the steps is the code's only where it moved beyond what
the machine did to the other regions' CPU time in the same diff: its interval must clear its floor widened by the
spread of the other regions' CPU ratios,

    widened = (1 + floor) * (1 + spread) - 1,   spread = min(max over the other regions s of |delta_s|, CAP_PCT)

(delta_s: each region's change of its CPU p5 at the before side's speed, i.e. its ratio against the median
region's, as a ratio either way). Leaving the region out of its own spread keeps a planted change visible: a region
whose CPU time doubled on a crowded side (+100%) is judged against the others' scatter, not its own. The spread is
capped at what crowding did in the crowded captures: one region whose CPU time jumped between runs for a reason of
its own (argmax's p5 is bimodal, ~840 µs or ~1.6 ms: one quiet capture of eight sat in the slow mode, -43% against
every crowded one) would otherwise widen every other region's floor to ±100% and hide a doubled one. A change the
machine could have made is not named: two regions moved alike by a change on a crowded side hide each other (each
is within the other's spread), the price of never gating on the machine. Where no machine was measured slower,
nothing here applies: the floor alone judges (the README's --no-batched-kv-append, kv.append_token +45%).
"""

from __future__ import annotations

import math

from roseprof.analysis import noise_floor

# The statistic a region is judged by over the steps when every run has CPU times (diff_metric.CPU_OWN_LOW); its
# median over the rollover steps is at the run's own pace (sections/steps.AT_ROLLOVER_CPU), which the crowding's
# per-region inflation is in on both sides of the ratio, so it is not widened.
CPU_P5 = (".cpu_own_p5_ns",)
# The most a crowded core moved one region's CPU p5 against the median region's, in the crowded captures whose quiet
# side was not in argmax's slow mode (docs/BENCHMARKS.md, session 23: model.forward +27.2%, pytest-497), rounded up.
CAP_PCT = 30.0


def _log_moves(metrics: list[dict]) -> dict[str, float]:
    """Each region's CPU p5 move at the before side's speed, as |ln(after / before)|, by metric name."""
    out = {}
    for m in metrics:
        d = m.get("delta_pct")
        if m["name"].startswith("regions.") and m["name"].endswith(CPU_P5) and d is not None and d > -100:
            out[m["name"]] = abs(math.log1p(d / 100.0))
    return out


def spread_pct(metrics: list[dict], metric: str) -> float | None:
    """How far the other regions' CPU times moved in this diff (percent, the largest of them either way, at most
    CAP_PCT), or None where fewer than two other regions have a CPU time to tell it."""
    others = [v for name, v in _log_moves(metrics).items() if name != metric]
    if len(others) < 2:
        return None
    return min(100.0 * math.expm1(max(others)), CAP_PCT)


def widened_floor_pct(floor_pct: float, spread: float) -> float:
    """The floor widened by the spread, as one ratio: a move must be beyond both."""
    return 100.0 * ((1.0 + floor_pct / 100.0) * (1.0 + spread / 100.0) - 1.0)


def machines(row: dict, metrics: list[dict]) -> dict | None:
    """Where a region row judged by its CPU time over the steps moved no more than the slower machine moved the
    other regions: {"floor_pct", "spread_pct", "widened_pct"} (the row is the machine's); None where it is the
    code's (it clears the widened floor, or it is not such a row, or the diff has too few regions to tell)."""
    if row.get("kind") != "region" or row.get("at_rollover") or not row["metric"].endswith(CPU_P5):
        return None
    m = next((m for m in metrics if m["name"] == row["metric"]), None)
    floor = row.get("floor_pct") if row.get("floor_pct") is not None else (m or {}).get("floor_pct")
    spread = spread_pct(metrics, row["metric"])
    if m is None or floor is None or spread is None:
        return None
    widened = widened_floor_pct(floor, spread)
    if noise_floor.clears(m.get("ci_low_pct"), m.get("ci_high_pct"), widened):
        return None
    return {"floor_pct": floor, "spread_pct": spread, "widened_pct": widened}
