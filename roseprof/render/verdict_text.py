"""The diff's verdict in words, shared by the terminal and the diff dashboard: the headline sentence, each side,
what one run a side can see, and what backs the figures."""

from __future__ import annotations

from roseprof.render import kernel_labels, text
from roseprof.render.text import duration


def what_moved(row: dict) -> str:
    """What a "where the time moved" row measures: a region's own time (in the steps no wait for a core landed in:
    `p5 own time`; its thread CPU time where the runs have it: `p5 own CPU time`), its median time in the rollover
    steps, or a time."""
    if row.get("at_rollover"):
        return "median own CPU time" if row.get("own_time") else "median time"
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


# How many regions and kernels the headline sentence names (where the time moved lists them all).
NAMED = 3
DIRECTIONS = ("faster", "slower")


def row_label(row: dict) -> str:
    """A decision row's name in words: the headline's label, a region's or kernel's name (a kernel's base name,
    tagged where two share it: `kernel_labels`, set by headline_sentence), or the metric's words."""
    if row.get("kind") == "kernel" and row.get("label"):
        return kernel_labels.kernel_short(row.get("shown", row["label"]))
    return row.get("label") or text.metric_label(row["metric"])


def _said(row: dict) -> str:
    """`roseinfer.kv.append_token +15.3% slower`: a decision row as the headline names it (`... at rollover steps
    +130.5% slower` where it changed in the rollover steps alone)."""
    delta = "" if row["delta_pct"] is None else f" {row['delta_pct']:+.1f}%"
    where = " at rollover steps" if row.get("at_rollover") else ""
    return f"{row_label(row)}{where}{delta} {row['word']}"


def per_what(rows: list[dict]) -> str:
    """What a table of "where the time moved" rows is per: a decode step, a rollover step, or a run."""
    if rows and rows[0].get("at_rollover"):
        return "per rollover step"
    return "per decode step" if rows and rows[0].get("per_step") else "per run"


def headline_sentence(v: dict) -> str:
    """One line, from the diff's one decision (analysis/decision.py): the overall word, then every figure that
    changed (or that the steps did not), then the regions and kernels that did, as the stars and the gate see
    them (shared with the diff dashboard)."""
    d = v["decision"]
    overall = v["overall"]
    lead = {
        "faster": "after is faster",
        "slower": "after is slower",
        "mixed": "after is slower in some figures, faster in others",
        "no clear change": "no clear change",
    }.get(overall, "no headline figure could be tested (see the samples column)")
    if (d.get("machine_slower") or d.get("tail_waits")) and overall == "no clear change":
        lead = "no clear change in the code"
    figures = [r for r in d["rows"] if r["kind"] == "figure"]
    # a region whose CPU time the slower machine moved (decision.py, cpu_spread.py) is said in the machine's line
    named = [r for r in d["rows"] if r["kind"] != "figure" and not r.get("machine")]
    kernels = [r for r in named if r["kind"] == "kernel"]
    # kernels that share a base name (with each other, or with a kernel that did not change) keep their tags, as in
    # the kernels table
    labels = kernel_labels.kernel_labels([r["label"] for r in kernels], v.get("kernel_names", ()))
    shown = dict(zip((r["label"] for r in kernels), labels))
    named = [{**r, "shown": shown[r["label"]]} if r["kind"] == "kernel" else r for r in named]
    parts = []
    # the figures by word and whose (the code's, the machine's: a tail figure can be the machine's beside a median
    # figure of the code's), the headline's first
    for w, mine in dict.fromkeys((r["word"], bool(r["machine"])) for r in figures):
        same = [r for r in figures if r["word"] == w and bool(r["machine"]) == mine]
        listed = ", ".join(_said(r).removesuffix(f" {w}") for r in same[:NAMED])
        more = f" (+{len(same) - NAMED} more figures)" if len(same) > NAMED else ""
        machine = " (the machine, not the code)" if mine else ""
        parts.append(f"{listed}{more} {w}{machine}")
    if not figures and v["headline"]:
        tested = any(r["word"] == "no clear change" for r in v["headline"])
        parts.append("steps: no clear change" if tested else "steps: not tested")
    for i, r in enumerate(named[:NAMED]):
        said = _said(r)
        if i == 0 and r.get("moved_ns") is not None:  # how much time a step that is, by what it was judged on
            moved = r["moved_ns"]
            per = "rollover step" if r.get("at_rollover") else "step"
            said += f" ({'+' if moved > 0 else '-'}{duration(abs(moved))} {what_moved(r)} per {per})"
        parts.append(said)
    if len(named) > NAMED:
        parts.append(f"{len(named) - NAMED} more in where the time moved")
    if not d["rows"] and overall == "no clear change":
        inside = v.get("clear_of_zero") or any(
            r.get("why") and "noise floor" in r["why"] for r in v["headline"]
        )
        why = "no figure it judges by clears its noise floor" if inside else "every interval includes 0"
        return f"no clear change between before and after ({why})"
    return f"{lead} — {'; '.join(parts)}" if parts else lead


def machine_line(v: dict) -> str | None:
    """Where the wall-clock figures moved with the code unchanged: the machine was slower on one side, said in the
    first lines (the figures stay in the table; the gate does not fail on them alone). The figures are after's
    against before's whichever side was slower: +110% (after waited), or -56% (before did)."""
    d = v.get("decision") or {}
    if d.get("tail_waits"):
        return tail_line(d)
    if not d.get("machine_slower"):
        return None
    s = d["slowdown"]
    side = d.get("slower_machine") or "after"
    grew = "grew" if side == "after" else "shrank"  # what the code did not do beyond its floor
    if s.get("unwaited_pct") is not None:  # the kernel counted the waits for a core (roseinfer/run_delay.py)
        how = (
            f"the step's wall time {s['wall_pct']:+.1f}%, its time less its waits for a core (the kernel's run "
            f"delay) {s['unwaited_pct']:+.1f}%"
        )
        if s.get("cpu_pct") is not None:  # what `unevenly` below speaks of
            how += f", the regions' CPU time per step {s['cpu_pct']:+.1f}%"
    elif s.get("cpu_pct") is not None:
        waited = (
            "waits for a core, not more work"
            if side == "after"
            else "waits for a core in before, not more work"
        )
        how = (
            f"the step's wall time {s['wall_pct']:+.1f}% while the regions' CPU time per step moved "
            f"{s['cpu_pct']:+.1f}% ({waited})"
        )
    else:
        how = f"the step's wall time {s['wall_pct']:+.1f}%, every region's time alike {s['speed_pct']:+.1f}%"
    gate = (
        "so the gate does not fail on the wall-clock figures alone"
        if side == "after"
        else "so the wall-clock figures' drop is the machine's, not the code's"
    )
    code = [
        r for r in d["rows"] if r["kind"] != "figure" and r["word"] in DIRECTIONS and not r.get("machine")
    ]
    uneven = _uneven(d["rows"])
    if code:  # regions judged by their CPU time, which the machine's waits are not in: the code's, said apart
        return (
            f"the machine was slower in {side}: {how}{uneven}; {gate}, the regions named are judged by their CPU "
            "time"
        )
    return f"the machine was slower in {side}: {how}{uneven}; no region of the code {grew} beyond its floor, {gate}"


def _ms_range(values: list[float]) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:.1f}" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}-{hi:.1f}"


def _tail_steps(side: dict) -> str:
    """`48.2-58.0 ms of wall on 21.3-27.1 ms of CPU`: a side's slowest steps, the range over its runs."""
    return f"{_ms_range(side['wall_ms'])} ms of wall on {_ms_range(side['cpu_ms'])} ms of CPU"


def tail_line(d: dict) -> str:
    """Where only one side's slowest steps waited (decision.tail_waited): which figures are the machine's and the
    evidence, the slowest steps' wall and CPU time on both sides, after's against before's."""
    side = d["tail_waits"]
    t = d["slowdown"]["tail"]
    figures = [r for r in d["rows"] if r["kind"] == "figure" and r.get("machine")]
    listed = ", ".join(_said(r).removesuffix(f" {r['word']}") for r in figures[:NAMED])  # `ITL p99 +75.5%`
    more = f" (+{len(figures) - NAMED} more figures)" if len(figures) > NAMED else ""
    where = "waits in no one region"
    if t.get("unwaited_pct") is not None:  # the kernel counted the waits for a core (decision.tail_waited)
        where = f"less their waits for a core {t['unwaited_pct']:+.1f}%"
    return (
        f"the machine was slower in {side}'s slowest steps, not the code: {listed}{more} (the slowest "
        f"{100 - t['pct']:g}% of steps took {_tail_steps(t['after'])} in after, {_tail_steps(t['before'])} in "
        f"before: wall {t['wall_pct']:+.1f}%, CPU {t['cpu_pct']:+.1f}%, {where}); the gate does not fail on these "
        "figures alone"
    )


def _uneven(rows: list[dict]) -> str:
    """The regions whose CPU time the slower machine moved as much as the others (decision.py, cpu_spread.py), in
    words, said after the regions' CPU time per step: `, unevenly: roseinfer.model.forward +27.2% is within the ±46.0%
    that the other regions' moves and the floor allow, the machine's`; empty where there are none."""
    mine = [r for r in rows if r["kind"] != "figure" and r.get("machine")]
    if not mine:
        return ""
    listed = ", ".join(f"{row_label(r)} {r['delta_pct']:+.1f}%" for r in mine[:NAMED])
    more = f" and {len(mine) - NAMED} more" if len(mine) > NAMED else ""
    widest = max(r["widened_pct"] for r in mine)
    verb = "is" if len(mine) == 1 else "are"
    return (
        f", unevenly: {listed}{more} {verb} within the ±{widest:.1f}% that the other regions' moves and the floor "
        "allow, the machine's"
    )


def side_line(label: str, side: dict) -> str:
    """`before  ID  (name)`, or for a group `before is a group of 3 runs named NAME: ID1, ID2, ID3`; a side pooled
    from unlike runs (--pool-mixed) says what it mixes. A group's notes come before its run ids: the ids are long
    and unbreakable, and on an 80-column terminal they wrap, so words after them would land lines below."""
    runs = side.get("runs") or [side["id"]]
    notes = ""
    if side.get("loads"):
        notes += f"  ({side['loads']} loads: --repeat)"
    if side.get("mixed"):
        notes += f"  [pooled with --pool-mixed: {side['mixed']}]"
    if len(runs) == 1:
        return f"{label:<7} {side['id']}  ({side.get('name')}){notes}"
    names = side.get("names") or [side.get("name")]
    named = names[0] if len(names) == 1 else ", ".join(map(str, names[:-1])) + f" and {names[-1]}"
    return f"{label} is a group of {len(runs)} runs named {named}{notes}: {', '.join(runs)}"


def options_line(v: dict) -> str | None:
    """The diff's first line where the two commands differ only in options: which (the A/B it is about)."""
    a, b = v["before"].get("options") or [], v["after"].get("options") or []
    if not a and not b:
        return None
    sides = [f"{label} {' '.join(items)}" for label, items in (("before", a), ("after", b)) if items]
    return f"options apart: {'; '.join(sides)} (one program)"


def tools_note(v: dict) -> str | None:
    """Where the two sides were captured with different tools (nsys against torch.profiler): each tool's own cost
    is in its run's times, so a change may be the tools' rather than the program's."""
    tools = [v[side].get("tool") for side in ("before", "after")]
    tools = [t.get("name") if isinstance(t, dict) else None for t in tools]
    if None in tools or tools[0] == tools[1]:
        return None
    return (
        f"before and after come from different tools ({tools[0]} and {tools[1]}): each tool's own cost is in its "
        "run's times, so part of a change may be the tools'; capture both with one tool to compare the program"
    )


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
    work = (
        " GPU work: the time a step's kernels kept the GPU busy (kernels of two streams at once count once)."
        if any(r["metric"].startswith("gpu.kernel_") for r in v["headline"])
        else ""
    )
    return (
        f"{backing}A figure is tested with ≥ {need['p50']} samples per run (p99: ≥ {need['p99']}, so that the "
        f"tail is more than one sample); throughput is one figure per run, with no interval.{work}"
    )
