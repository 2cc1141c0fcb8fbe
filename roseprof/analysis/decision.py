"""The one decision a diff makes, which every view of it reads: the headline sentence, the stars of the metrics
table, "where the time moved", the gate (`--fail-on-regression`) and the diff dashboard (issue 44: they used to
decide apart and disagreed: "no clear change" above a starred region row, a gate that fired on a figure the
headline did not name).

A decision row is one thing that changed, with its word (faster / slower / more launches / fewer launches), the
metric it was judged by and that metric's noise floor:

    figure   a figure of the whole run (step time, ITL, TTFT, the GPU's work per step, a load's latencies, ncu's)
             whose interval clears its floor (noise_floor.py)
    region   a region judged by the one statistic verdict._changes picks for it (its own CPU time's p5, else its
             own time's p5, else its total); its other statistics are evidence, shown but never a change alone;
             or, where that did not change, by its median time in the rollover steps (verdict._rollover_changes:
             `at_rollover`), when that changed and its time in the other steps did not
    kernel   the same for a kernel

A group diff's decision also has the rows that every run pair of it, one run a side, decided alike
(run_pairs.py: `every_pair`), judged by the group's figure of that statistic: a group is never less decisive
than its run pairs. A metric is starred (`significant` in --json) exactly when it is a decision row's metric;
`clears_floor` keeps what its interval alone says (a starred metric clears it or is `every_pair`). The gate
fails on the decision's slower rows over the threshold (those --metric
picks, where given), except wall-clock figures that a slower machine explains (machine_speed.slowdown). The
machine is judged both ways (slower_machine): an after side that ran on a busier machine makes the wall-clock
figures slower, a before side that did makes them faster; either is said as the machine's, not the code's, and
only where such a figure moved beyond its floor (a machine that explains no figure is not said). The
regions judged by their CPU time stay the code's (named and gated beside it) only where they moved beyond what that
machine did to the other regions' CPU time in the same diff (cpu_spread.py: a crowded core inflates them unevenly);
one that did not is the machine's too (said in the machine's line, starred, never gated).

Where the runs' median steps did not wait but their slowest steps did (tail_waits.py), the tail figures alone (a
step's or a token's p95, p99, mean) that moved are the machine's (tail_waited): their steps' wall time grew and
their CPU time did not grow with it, and the waits were not in one region (a sleep planted there is the code's).
They are said in the first lines with the slowest steps' wall and CPU time, stay in the table and are not gated.
"""

from __future__ import annotations

import fnmatch
import re

from roseprof.analysis import cpu_spread, tail_waits

# Metrics that belong to a region or kernel: a region row stands for them all (the statistic it was judged by is
# the row's metric; the others are evidence).
EVIDENCE = ("regions.", "kernels.", "steps.rollover.regions", "steps.normal.regions")
DIRECTIONS = ("faster", "slower")
# Wall-clock figures a machine that was slower moves with the code unchanged (the step, the tokens, the requests).
WALL_FIGURES = ("steps.", "itl.", "requests.")
# A slower machine: the step's wall time grew, and the regions' CPU time per step grew by less than this share of
# that growth (waits for a core are in the wall time, not in the CPU time; a heavier code path is in both).
CPU_SHARE = 0.5
# The wall-clock figures a run's slowest steps move while its median step does not: a step's or a token's p95, p99
# and mean, over all steps or some (rollover, normal; at rollover, elsewhere). Not TTFT: a request's first token
# waits on its prefill, which no decode step holds.
TAIL_FIGURE = re.compile(r"^(steps|itl)\.([a-z_]+\.)?(p95|p99|mean)_(ns|ms)$")
# ... and every region's time grew alike: the machine speed factor (machine_speed.py) moved by at least this share
# of the step's wall time (same-code pairs on the shared 2-core box: +82% of +103%; a 15 ms sleep planted in
# kv.append_token: +36% of +214%)
ALIKE = 0.5
MEDIAN_STEP = "steps.p50_ns"  # the median step's wall-clock figure


def word(m: dict) -> tuple[str, str | None]:
    """(word, why) for one metric row of the diff, from its interval against its floor."""
    d = m.get("delta_pct")
    if d is None:
        return "not tested", "before is zero"
    if m.get("ci_low_pct") is None:
        need = m.get("min_samples")
        if need is None and m["name"].startswith("requests.ttft."):
            return "not tested", "a run stored without per-request TTFT (import it again)"
        if need is None:
            return "not tested", "one figure per run: nothing to resample"
        have = min(m.get("units_a", m.get("n_a", 0)), m.get("units_b", m.get("n_b", 0)))
        if have < need:
            return "too few samples", f"needs {need} per run"
        return "not tested", "no interval"
    if not clears(m):
        if m.get("zero_width"):
            return "no clear change", "the resampling saw no variation (an interval of zero width)"
        if m.get("excludes_zero"):
            return "no clear change", f"inside the ±{m['floor_pct']:g}% noise floor"
        return "no clear change", None
    better = (d < 0) == m.get("lower_is_better", True)
    return ("faster" if better else "slower"), None


def clears(m: dict) -> bool:
    """Whether a metric's interval clears its noise floor (noise_floor.apply), whatever the decision made of it."""
    return bool(m.get("clears_floor", m.get("significant")))


def is_evidence(name: str) -> bool:
    return name.startswith(EVIDENCE)


def _figure_rows(metrics: list[dict], headline: list[dict]) -> list[dict]:
    """Every figure (not a region's or kernel's statistic) whose interval clears its floor, the headline's first in
    its order."""
    labels = {r["metric"]: r["label"] for r in headline}
    order = {name: i for i, name in enumerate(labels)}
    rows = []
    for m in metrics:
        if is_evidence(m["name"]) or not clears(m):
            continue
        w, _ = word(m)
        rows.append(
            {
                "kind": "figure",
                "metric": m["name"],
                "label": labels.get(m["name"]),  # None: the renderer words the metric's name
                "word": w,
                "delta_pct": m["delta_pct"],
                "floor_pct": m.get("floor_pct"),
            }
        )
    return sorted(rows, key=lambda r: order.get(r["metric"], len(order)))


def _named_rows(rows: list[dict], kind: str) -> list[dict]:
    return [
        {
            "kind": kind,
            "metric": r["metric"],
            "label": r["label"],
            "word": r["word"],
            "delta_pct": r["delta_pct"],
            "floor_pct": r.get("floor_pct"),
            "moved_ns": r.get("moved_ns"),
            # what it was judged on (render/verdict_text.what_moved words it)
            "own_time": r.get("own_time", False),
            "own_stat": r.get("own_stat"),
            "per_step": r.get("per_step", False),
            "at_rollover": r.get("at_rollover", False),  # judged by its time in the rollover steps alone
            "every_pair": r.get(
                "every_pair", False
            ),  # named by every run pair, one run a side (run_pairs.py)
        }
        for r in rows
    ]


def by_cpu_time(row: dict) -> bool:
    """Whether a region row was judged by its own thread CPU time (verdict._changes, _rollover_changes)."""
    return bool(row.get("own_time")) and str(row.get("own_stat") or "").startswith("CPU")


def wall_clock_grew(rows: list[dict]) -> bool:
    """Whether a wall-clock figure (the step, the tokens, the requests) grew beyond its floor: a decision row."""
    return any(
        r["kind"] == "figure" and r["metric"].startswith(WALL_FIGURES) and r["word"] == "slower" for r in rows
    )


def machine_slower(rows: list[dict], slowdown: dict | None) -> bool:
    """Whether the wall-clock figures that grew are the machine's: a wall-clock figure grew beyond its floor (a
    decision row: the machine is said only where it explains a figure that moved; the figures alone held where the
    step's wall time moved +0.5%, and "the machine was slower" was printed beside a region named by its CPU time,
    docs/BENCHMARKS.md session 23's pair r2), the step's wall time grew, every region's time grew alike (the
    machine speed factor moved by at least ALIKE of the wall time's move: a wait planted in one region, a sleep or
    a lock, moves that region alone), and where the runs have CPU times, the regions' CPU time
    per step grew by less than CPU_SHARE of the wall time's move (a wait for a core is in the wall time only;
    heavier code is in both); and no region or kernel judged by its wall time grew beyond its floor.

    Where every run's step log has the steps' waits for a core (the kernel's run delay, roseinfer/run_delay.py),
    they stand in for the regions' alike growth: the machine was slower where the median step grew beyond its
    floor, its wall time less those waits grew by less than CPU_SHARE of the wall time's move, and the CPU test
    holds. The regions cannot always tell: on a core shared with nine CPU
    burners (Linux 6.18) the engine's waits landed where its timeslices ended, the same places step after step,
    lm_head +38 ms and model.forward's own +25 ms a step while the small regions moved with their CPU time alone,
    so the speed factor moved +232% of the wall time's +1,127% and a crowded core read as the code's
    (docs/BENCHMARKS.md, session 33). A sleep or a lock is no wait for a core: it stays the code's.

    A region judged by its CPU time that grew does not stand in the machine's way: the machine's waits are not in
    that time, so it is the code's (named, gated) beside the wall-clock figures that are the machine's. A crowded
    core inflates some regions' CPU time unevenly (cache refills after every switch: `model.forward`'s own CPU
    time up to +43% against lm_head's +12% at most, one core shared with 3-9 CPU burners, docs/BENCHMARKS.md session 22),
    which may then clear its floor; it used to hide the machine as well (the wall time +1,200% read as the code's).
    decide() then judges such a row against its floor widened by the other regions' spread (cpu_spread.py)."""
    if not slowdown or not wall_clock_grew(rows):
        return False
    if any(r["kind"] != "figure" and r["word"] == "slower" and not by_cpu_time(r) for r in rows):
        return False
    wall, speed, cpu = slowdown.get("wall_pct"), slowdown.get("speed_pct"), slowdown.get("cpu_pct")
    if wall is None or wall <= 0:
        return False
    less_work = cpu is None or cpu < CPU_SHARE * wall
    if less_work and waits_grew(slowdown) and median_step_grew(rows):
        return True
    return bool(speed is not None and speed >= ALIKE * wall and less_work)


def waits_grew(growth: dict) -> bool | None:
    """Where the runs have the steps' waits for a core (the kernel's run delay, `unwaited_pct`): whether they, not
    the rest of the steps' wall time, grew (the rest by less than CPU_SHARE of the wall time's move, `wall_pct`,
    which is above 0). None where the runs do not have them. `growth`: slowdown's figures, or its tail's."""
    unwaited = growth.get("unwaited_pct")
    return None if unwaited is None else unwaited < CPU_SHARE * growth["wall_pct"]


def median_step_grew(rows: list[dict]) -> bool:
    """Whether the median step's wall time grew beyond its floor (a decision row): where only the slowest steps
    moved, the median step's figures are noise, and the run delay's rule says nothing (tail_waited does)."""
    return any(r["kind"] == "figure" and r["metric"] == MEDIAN_STEP and r["word"] == "slower" for r in rows)


def is_tail(metric: str) -> bool:
    """Whether a figure is one the slowest steps move alone (TAIL_FIGURE)."""
    return bool(TAIL_FIGURE.match(metric))


def tail_waited(rows: list[dict], tail: dict | None, side: str) -> bool:
    """Whether `side` ("after", "before") waited in its slowest steps alone, which explains the tail figures that
    moved its way (after: slower; before: faster) as the machine's (tail_waits.py): every wall-clock figure that
    moved its way beyond its floor is a tail figure (a median step that moved is the code's, or the whole-step
    rule's, machine_slower), no region or kernel judged by its wall time moved its way, the slowest steps' wall time
    grew and their CPU time grew by less than CPU_SHARE of that, and their waits were not in one region (or, where
    the runs have the steps' waits for a core, their wall time less those waits grew by less than CPU_SHARE of it).

    The same-code pair of docs/BENCHMARKS.md session 24 (ITL p99 +75.5%: slowest steps 48-58 ms of wall on 21-27 ms
    of CPU) is the machine's; the planted --no-batched-rollover (its slowest steps are its rollover steps, whose CPU
    time grows) and a sleep planted in one region at a few steps (its waits all in that region) stay the code's."""
    if not tail:
        return False
    grew = "slower" if side == "after" else "faster"
    moved = [
        r
        for r in rows
        if r["kind"] == "figure" and r["metric"].startswith(WALL_FIGURES) and r["word"] == grew
    ]
    if not moved or not all(is_tail(r["metric"]) for r in moved):
        return False
    if any(r["kind"] != "figure" and r["word"] == grew and not by_cpu_time(r) for r in rows):
        return False
    g = tail if side == "after" else swapped(tail)
    wall, cpu = g.get("wall_pct"), g.get("cpu_pct")
    if wall is None or wall <= 0 or cpu is None or cpu >= CPU_SHARE * wall:
        return False
    counted = waits_grew(g)
    if counted is not None:  # the kernel counted their waits for a core
        return counted
    # where no region has both clocks (no place), a sleep cannot be told from the machine: the code's
    return tail[side]["place"] is not None and not tail_waits.one_place(tail[side])


def swapped(slowdown: dict) -> dict:
    """machine_speed.slowdown's figures with the sides swapped: how much slower before ran than after (a ratio
    r of after to before becomes 1 / r), so that one rule judges either side's machine."""
    return {
        key: None if pct is None else 100.0 * (100.0 / (100.0 + pct) - 1.0)
        for key, pct in slowdown.items()
        if key in ("wall_pct", "cpu_pct", "speed_pct", "unwaited_pct")
    }


def slower_machine(rows: list[dict], slowdown: dict | None) -> str | None:
    """Which side ran on the slower machine ("after", "before"), or None: machine_slower's rule both ways. Before
    slower is the rule on the swapped figures, with the code's part mirrored too: no region or kernel judged by
    its wall time got faster beyond its floor (a region that got slower does not make the step faster)."""
    if machine_slower(rows, slowdown):
        return "after"
    if slowdown and machine_slower(mirrored(rows), swapped(slowdown)):
        return "before"
    return None


def mirrored(rows: list[dict]) -> list[dict]:
    """The decision rows with faster and slower swapped: what they say with the sides swapped."""
    return [{**r, "word": {"faster": "slower", "slower": "faster"}.get(r["word"], r["word"])} for r in rows]


def decide(
    metrics: list[dict],
    headline: list[dict],
    regions: list[dict],
    kernels: list[dict],
    slowdown: dict | None,
    figures: list[dict] | None = None,
) -> dict:
    """The decision of a diff: its rows (the figures that clear their floors, and `figures`: those every run pair
    decided alike (verdict._from_pairs), then verdict's `regions` and `kernels` rows, all of them), its overall
    word, and whether a slower machine, on either side, explains the wall-clock figures (`slowdown`:
    machine_speed.slowdown's, or None)."""
    rows = _figure_rows(metrics, headline)
    labels = {r["metric"]: r["label"] for r in headline}
    for f in figures or []:
        rows.append(
            {"kind": "figure", "metric": f["metric"], "label": labels.get(f["metric"]), "word": f["word"],
             "delta_pct": f["delta_pct"], "floor_pct": f.get("floor_pct"), "every_pair": True}
        )  # fmt: skip
    rows += _named_rows(regions, "region") + _named_rows(kernels, "kernel")
    # Only the slowest steps waited (tail_waits.py): the tail figures that moved that side's way are the machine's,
    # said with their steps' evidence (the median step's rule, machine_slower, may hold too where the median step
    # drifted within its floor, but says nothing of the steps that moved the figures).
    tail = None
    if slowdown:
        tail = next((s for s in ("after", "before") if tail_waited(rows, slowdown.get("tail"), s)), None)
    side = None if tail else slower_machine(rows, slowdown)
    machine = side is not None
    tail_word = {"after": "slower", "before": "faster"}.get(tail)
    for r in rows:
        figure = r["kind"] == "figure"
        r["machine"] = bool(machine and figure and r["metric"].startswith(WALL_FIGURES)) or bool(
            figure and tail_word and is_tail(r["metric"]) and r["word"] == tail_word
        )
    # Measured slower (a wall-clock figure of the median step cleared its floor and is the machine's,
    # machine_slower): a region's CPU time that the machine moved no more than the other regions' is the machine's
    # too (cpu_spread.py). Not where the slowest steps alone waited: the steps a region's CPU p5 comes from did not.
    if machine:
        for r in rows:
            spread = cpu_spread.machines(r, metrics)
            if spread:
                r.update(machine=True, **spread)
    words = {r["word"] for r in rows if r["word"] in DIRECTIONS and not r["machine"]}
    if words == set(DIRECTIONS):
        overall = "mixed"
    elif words:
        (overall,) = words
    elif any(r["word"] == "no clear change" for r in headline) or rows:
        overall = "no clear change"
    else:
        overall = "not tested"
    # machine_slower: either side's machine was slower (the wall-clock figures are its); slower_machine: which;
    # tail_waits: which side waited in its slowest steps alone (its tail figures are the machine's), or None
    return {
        "rows": rows,
        "overall": overall,
        "machine_slower": machine,
        "slower_machine": side,
        "tail_waits": tail,
        "slowdown": slowdown,
    }


def mark(metrics: list[dict], decision: dict) -> None:
    """Star exactly the decision's metrics (`significant`); `clears_floor` keeps what the interval alone said;
    `machine`: a decision row the machine explains (the tables mark it apart from the code's changes)."""
    decided = {r["metric"] for r in decision["rows"]}
    paired = {r["metric"] for r in decision["rows"] if r.get("every_pair")}
    machines = {r["metric"] for r in decision["rows"] if r.get("machine")}
    for m in metrics:
        m.setdefault("clears_floor", m.get("significant", False))
        m["significant"] = m["name"] in decided
        m["machine"] = m["name"] in machines
        # starred without clearing its floor here: every run pair, one run a side, named it (run_pairs.py)
        m["every_pair"] = m["name"] in paired


def _names_of(row: dict, names: list[str]) -> list[str]:
    """The metric names a decision row answers for: its own, and for a region or kernel every statistic of it."""
    if row["kind"] == "figure":
        return [row["metric"]]
    prefix = "regions." if row["kind"] == "region" else "kernels."
    return [n for n in names if n.startswith(f"{prefix}{row['label']}.")] + [row["metric"]]


def gate(
    metrics: list[dict], decision: dict, threshold_pct: float | None, patterns: list[str] | None
) -> list[dict]:
    """Mark (`regression`) and return the metrics the gate fails on: the decision's slower rows beyond
    threshold_pct, those whose metric (a region's or kernel's: any of its statistics) --metric `patterns` picks,
    where given; never a wall-clock figure a slower machine explains."""
    names = [m["name"] for m in metrics]
    by_name = {m["name"]: m for m in metrics}
    for m in metrics:
        m["regression"] = False
    out = []
    if threshold_pct is None:
        return out
    for r in decision["rows"]:
        if r["word"] != "slower" or r["machine"] or r["delta_pct"] is None:
            continue
        if abs(r["delta_pct"]) <= threshold_pct:
            continue
        if patterns and not any(fnmatch.fnmatchcase(n, p) for n in _names_of(r, names) for p in patterns):
            continue
        r["regression"] = True
        m = by_name[r["metric"]]
        m["regression"] = True
        out.append(m)
    return out
