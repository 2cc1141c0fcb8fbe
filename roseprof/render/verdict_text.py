"""The diff's verdict in words, shared by the terminal and the diff dashboard: the headline sentence, each side,
what one run a side can see, and what backs the figures."""

from __future__ import annotations

from roseprof.render.text import duration


def what_moved(row: dict) -> str:
    """What a "where the time moved" row measures: a region's own time (in the steps no wait for a core landed in:
    `p5 own time`; its thread CPU time where the runs have it: `p5 own CPU time`), or a time."""
    if not row.get("own_time"):
        return "time"
    stat = row.get("own_stat", "")
    if stat.startswith("CPU"):
        return "p5 own CPU time"  # its thread CPU time, which no wait for a core is in
    return "p5 own time" if stat.startswith("p5") else "own time"


def what_moved_in(rows: list[dict]) -> str:
    """What a table of "where the time moved" rows measures: one statistic, or each that its rows use in order (a
    region judged by its wall p5 because one run lacks its CPU times sits beside regions judged by CPU time)."""
    return " / ".join(dict.fromkeys(what_moved(r) for r in rows))


def headline_sentence(v: dict) -> str:
    """One line: what changed, in the runs' own words, and where the time moved most (shared with the diff
    dashboard)."""
    overall = v["overall"]

    def listed(word: str) -> str:
        return ", ".join(f"{r['label']} {r['delta_pct']:+.1f}%" for r in v["headline"] if r["word"] == word)

    if overall in ("faster", "slower"):
        out = f"after is {overall} than before: {listed(overall)}"
    elif overall == "mixed":
        out = f"after is slower in {listed('slower')}; faster in {listed('faster')}"
    elif overall == "no clear change":
        inside = any(r.get("why") and "noise floor" in r["why"] for r in v["headline"])
        why = "no interval clears its noise floor" if inside else "every interval includes 0"
        # With a region below that did move, say that this is about the headline figures only.
        where = "in the step, ITL and TTFT figures" if v.get("moved_most") else "between before and after"
        out = f"no clear change {where} ({why})"
    else:
        out = "no headline figure could be tested (see the samples column)"
    most = v.get("moved_most")
    if most:
        what = what_moved(most)
        per = " per step" if most.get("per_step") else ""
        moved = most["moved_ns"]
        out += (
            f"; {what} {'grew' if moved > 0 else 'fell'} most in {most['label']}: "
            f"{'+' if moved > 0 else '-'}{duration(abs(moved))}{per} ({most['delta_pct']:+.1f}%)"
        )
    return out


def side_line(label: str, side: dict) -> str:
    """`before  ID  (name)`, or for a group `before  a group of 3 runs named NAME: ID1, ID2, ID3`; a side pooled
    from unlike runs (--pool-mixed) says what it mixes."""
    runs = side.get("runs") or [side["id"]]
    if len(runs) == 1:
        out = f"{label:<7} {side['id']}  ({side.get('name')})"
    else:
        out = f"{label} is a group of {len(runs)} runs named {side.get('name')}: {', '.join(runs)}"
    if side.get("loads"):
        out += f"  ({side['loads']} loads: --repeat)"
    if side.get("mixed"):
        out += f"  [pooled with --pool-mixed: {side['mixed']}]"
    return out


def one_run_note(v: dict) -> str | None:
    """With one run a side: what its intervals see, what makes a verdict, and how often one run a side calls a
    change between two runs of the same code."""
    if not v.get("one_run_a_side"):
        single = [side for side in ("before", "after") if v[side].get("samples", 1) == 1]
        if len(single) == 1:  # one side a group, the other one run: its drift between runs is unseen
            return (
                f"{single[0]} is one run: the interval sees the drift between runs on the other side only; "
                f"capture --repeat 3 for {single[0]} too for a verdict"
            )
        return None
    fa = v.get("one_run_false_alarms") or {}
    rate = ""
    if fa.get("pairs"):
        worded = f", a faster/slower word in {fa['worded']}" if "worded" in fa else ""
        rate = (
            f" (same code, one run a side: the gate fired in {fa['fired']} of {fa['pairs']} pairs{worded}, "
            f"{fa['where']})"
        )
    return (
        "one run a side: the intervals see only the variation inside each run, not the drift between runs"
        f"{rate}; capture --repeat 3 a side for a verdict"
    )


def samples(row: dict) -> str | None:
    """How many samples back a headline figure: `568 tokens in 71 steps` (a load's: `in 40 requests`), `71
    steps`, `8 / 9 requests`."""
    if row["samples"] is None or row["n_before"] is None:
        return None
    nb, na = row["n_before"], row["n_after"]
    out = f"{nb:,} {row['samples']}" if nb == na else f"{nb:,} / {na:,} {row['samples']}"
    if "steps_before" in row:
        sb, sa = row["steps_before"], row["steps_after"]
        units = row.get("units", "steps")
        out += f" in {sb:,} {units}" if sb == sa else f" in {sb:,} / {sa:,} {units}"
    return out


def samples_note(v: dict) -> str:
    """The footnote under the headline figures: what backs them and what a figure needs to be tested."""
    seen = []
    for r in v["headline"]:
        s = samples(r)
        if s and s not in seen:
            seen.append(s)
    need = v["min_samples"]
    groups = any(v[side].get("samples", 1) > 1 for side in ("before", "after"))
    # A group's counts are its runs' together: per side, not per run.
    backing = f"Samples per {'side' if groups else 'run'}: {'; '.join(seen)}. " if seen else ""
    return (
        f"{backing}A figure is tested with ≥ {need['p50']} samples per run (p99: ≥ {need['p99']}, so that the "
        "tail is more than one sample); throughput is one figure per run, with no interval."
    )
