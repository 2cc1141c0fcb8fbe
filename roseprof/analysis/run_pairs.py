"""What the pairs of runs of a group diff decide one run a side: a group is never less decisive than that (issue 44).

A diff of groups judges each metric by the hierarchical interval, which has the drift between runs in it, against
the group floors; one run a side judges by the within-run interval against the wider one-run floors. The two could
disagree: 3 runs a side said "no clear change" where each name's latest run, one a side, named
roseinfer.kv.append_token slower. So a group's decision also takes what its run pairs decide alike.

The pairs: the latest run before against the latest after (what `roseprof diff --latest` compares), the
second-latest against the second-latest, ... (min(n_before, n_after) pairs), each decided exactly as `roseprof
diff` decides one run a side (diff.compare with the one-run floors and the same seed, then verdict). A row that
every pair names with one word (a region, at rollover steps or over all steps, a kernel, or a figure; never a
wall-clock figure a slower machine explains) is a row of the group's decision too, with the group's figure of the
statistic the pairs judged (verdict._from_pairs). So whatever all of a group's run pairs name, the group names.
A row that only some pairs name is not taken: the other pairs of the same captures did not see it.

Not for loads (`roseprof load --repeat K`: its K loads are not runs a diff can take one a side) nor for sweeps.
"""

from __future__ import annotations

from roseprof.analysis import machine_speed
from roseprof.analysis.diff import compare, floor_for
from roseprof.analysis.run_data import RunData
from roseprof.analysis.verdict import verdict

# The words a row that changed has (a kernel launched more or fewer times a step is worded so).
MOVED = ("faster", "slower", "more launches", "fewer launches")
_SIDES = ({"id": "before", "name": "before"}, {"id": "after", "name": "after"})


def pairs(a: list[RunData], b: list[RunData]) -> list[tuple[RunData, RunData]]:
    """The run pairs of groups a and b (each oldest first): the latest of each, then the second-latest, ..."""
    return list(zip(reversed(a), reversed(b)))


def key(row: dict) -> tuple:
    """What a decision row says, as two pairs' rows are matched: the metric it was judged by, its word, where."""
    return row["kind"], row["metric"], row["word"], bool(row.get("at_rollover"))


def decided(a: RunData, b: RunData, min_effect_pct: float | None = None) -> list[dict]:
    """The rows one run a side decides, a against b (as `roseprof diff` does: its floors, seed and verdict), that
    say a change: the moved words, not a wall-clock figure a slower machine explains."""
    metrics = compare(a, b, floor=floor_for(a, b, min_effect_pct))
    v = verdict(metrics, *_SIDES, slowdown=machine_speed.slowdown([a], [b]))
    return [r for r in v["decision"]["rows"] if r["word"] in MOVED and not r["machine"]]


def agreed(a: list[RunData], b: list[RunData], min_effect_pct: float | None = None) -> list[dict]:
    """The rows every run pair of groups a and b decides alike (the latest pair's, in its order); none for one run
    a side (its one pair is the diff itself)."""
    if len(a) == 1 and len(b) == 1:
        return []
    common: dict[tuple, dict] | None = None
    for ra, rb in pairs(a, b):
        rows = {key(r): r for r in decided(ra, rb, min_effect_pct)}
        common = rows if common is None else {k: r for k, r in common.items() if k in rows}
        if not common:
            break
    return list((common or {}).values())
