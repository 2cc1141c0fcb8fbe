"""Issue 44: the machine judged on both sides, and the rollover path judged by its CPU time. A before side captured
on a busier machine is said as the machine's (its wall-clock figures read "faster (machine)", never "after is
faster"), as an after side is; a region slower at the rollover steps alone is named by its own CPU time there at its
run's pace, which neither the machine's waits nor a change in every step moves. On real CPU captures of the engine
(nsys), the CLI run as a user runs it (subprocess, 80 columns)."""

import copy
import json
import re
import subprocess
import sys

import numpy as np
import pytest

from roseprof import api
from roseprof.analysis import cpu_spread, decision, machine_speed, noise_floor
from roseprof.analysis.diff import compare
from roseprof.analysis.noise_floor import NoiseFloor
from roseprof.render.verdict_text import NAMED, headline_sentence, machine_line
from roseprof.run.store import RunStore
from tests.helpers import roseprof
from tests.roseprof.engine_captures import WORKLOAD, copy_store
from tests.roseprof.test_diff_decision import (  # a busier machine, and the decision on two runs
    _decide,
    _waited,
)

pytestmark = pytest.mark.nsys

KV = "roseinfer.kv.append_token"
CPU_AT_ROLLOVER = f"steps.rollover.regions_cpu_p50.{KV}"
# The engine on one core (taskset), alone there or beside nine CPU burners pinned to it too, each in a session of its
# own: the kernel shares a core between sessions first (sched_autogroup), so burners in the test's session took
# little from the engine (its steps 1.0-1.4x the other capture's with 2 to 9 of them, load 7). Crowded, the engine
# gets about a tenth of the core, so its steps take several times as long in wall time, while its own work (CPU
# time) is the same code's. Both sides run one command.
ONE_CORE = ["taskset", "-c", "0"]

BURNERS = 9


def _dirs(root):
    return ["--traces-dir", root / "traces", "--dashboards-dir", root / "dashboards"]


@pytest.fixture(scope="module")
def store(small_blocks_capture, tmp_path_factory):
    # small-blocks (8-token KV blocks: ~18 rollover steps a run; WORKLOAD's 64-token blocks: 2): the session's,
    # copied (engine_captures.py); it needs nsys, as the captures below
    root = copy_store(small_blocks_capture, tmp_path_factory.mktemp("machine-sides"))

    def capture(name, *cmd):
        proc = roseprof("nsys", "--name", name, *_dirs(root), "--", *cmd)
        assert proc.returncode == 0, proc.stdout + proc.stderr

    capture("quiet", *ONE_CORE, *WORKLOAD)
    burn = [*ONE_CORE, sys.executable, "-c", "while True: pass"]
    burners = [subprocess.Popen(burn, start_new_session=True) for _ in range(BURNERS)]
    try:
        capture("crowded", *ONE_CORE, *WORKLOAD)
    finally:
        for p in burners:
            p.kill()
            p.wait()
    return root


def diff(root, a, b, *args):
    return roseprof("diff", a, b, *_dirs(root), *args, env={"COLUMNS": "80"})


def diff_json(root, a, b, *args):
    proc = diff(root, a, b, "--json", *args)
    assert proc.returncode in (0, 1) and proc.stdout, proc.stderr
    return json.loads(proc.stdout)


def _run(root, name):
    (run,) = api.resolve_side(RunStore(root / "traces"), [name], latest=True)
    return api.load_run(run)


def _first_lines(text: str) -> str:
    """The diff's lines before its first table (the sides, the answer and the machine's line)."""
    lines = text.splitlines()
    end = next(i for i, line in enumerate(lines) if line.split()[:1] == ["figure"])
    return " ".join(lines[:end])


def _code_rows(decision_: dict) -> list[dict]:
    """The rows the decision counts as the code's: a direction word, not the machine's."""
    return [r for r in decision_["rows"] if r["word"] in decision.DIRECTIONS and not r["machine"]]


def test_a_before_side_on_a_busier_machine_is_the_machine_not_faster_code(store):
    """`diff crowded quiet`: the before side ran on a crowded core. Its steps' wall time is far above the quiet
    capture's while the regions' CPU time is not: the first lines say the machine was slower in before, the
    wall-clock figures stay in the table worded `faster (machine)`, nothing is the code's, and the gate passes. The
    same pair the other way round says the machine was slower in after, nothing the code's, the gate passing.

    What the crowding does to the CPU time is a race: every switch back to the engine refills its caches, and some
    regions' CPU time grows more than the rest (`model.forward` up to +43% against lm_head's +12% at most,
    docs/BENCHMARKS.md sessions 22-23), so one may clear its floor at the before side's speed. It is judged against
    its floor widened by the other regions' spread in the same diff (analysis/cpu_spread.py): the machine's, said in
    the machine's line, never the code's, never gated (a clean-clone CI run gated on h2d_block_tables' CPU p5 before
    that rule).

    One gap stays open (issue 44): argmax's CPU p5 is bimodal between captures of the same code (~840 µs or ~1.6
    ms; 1 quiet capture in 8, docs/BENCHMARKS.md session 23), beyond any spread the crowding gives the other
    regions, and is then named and gated as the code's. So a row of the code's may only be a region judged by its
    CPU time beyond its widened floor; never a wall-clock figure, never a region within the spread."""
    crowded, quiet = _run(store, "crowded"), _run(store, "quiet")
    expected = machine_speed.slowdown([crowded], [quiet])
    # the crowding did what it is for: the before side's steps took at least 1.6x as long in wall time
    assert expected["wall_pct"] < -37.5, expected
    # and the kernel says why: most of a crowded step is its waits for a core (roseinfer/run_delay.py)
    assert np.median(crowded.step_wait) > 0.5 * np.median(crowded.step_dur), np.median(crowded.step_wait)
    for a, b, side in (("crowded", "quiet", "before"), ("quiet", "crowded", "after")):
        out = diff_json(store, a, b, "--fail-on-regression", "10")
        d = out["verdict"]["decision"]
        got, want = dict(d["slowdown"]), machine_speed.slowdown([_run(store, a)], [_run(store, b)])
        # the slowest steps' measure (tail_waits.measure: lists, a region's name) apart: approx takes flat figures
        assert got.pop("tail")["wall_pct"] == pytest.approx(want.pop("tail")["wall_pct"])
        assert got == pytest.approx(want)
        assert d["slower_machine"] == side and d["machine_slower"], d["slowdown"]
        code = _code_rows(d)
        assert all(r["kind"] == "region" and decision.by_cpu_time(r) for r in code), code
        assert all(_beyond_widened(r, out["metrics"]) for r in code), code
        gated = set(out["regressions"])  # the gated metrics' names (diff --json)
        assert gated <= {r["metric"] for r in code}, (gated, code)
        text = diff(store, a, b, "--fail-on-regression", "10")
        assert text.returncode == (1 if gated else 0), text.stdout
        head = _first_lines(text.stdout)
        assert f"the machine was slower in {side}" in head, head
        if not code:
            assert out["verdict"]["overall"] == "no clear change", out["verdict"]["overall"]
            assert "after is faster" not in head and "after is slower" not in head, head
        # a region whose CPU time the crowding moved beyond its floor is the machine's, said so in the first lines
        regions = [r for r in d["rows"] if r["kind"] == "region" and r["machine"]]
        assert all(r["widened_pct"] > r["floor_pct"] for r in regions), regions
        assert all(r["label"] in " ".join(head.split()) for r in regions[:NAMED]), head
    step = next(
        r
        for r in diff_json(store, "crowded", "quiet")["verdict"]["headline"]
        if r["metric"] == "steps.p50_ns"
    )
    if step["word"] == "faster":  # the wall-clock figure stays, worded as the machine's
        assert step["machine"] and "faster (machine)" in diff(store, "crowded", "quiet").stdout


def test_cpu_work_planted_on_the_crowded_side_is_named(store):
    """The crowded capture with kv.append_token's CPU work tripled (+200%, and as much more wall time): beyond what
    the crowding did to the other regions' CPU time, so the code's, beside the machine's line. Quiet before it:
    slower, gated on that region alone; crowded-and-planted before the quiet one: faster, the gate passing.

    Not doubled: the floor widened by the crowding's spread reaches 49.5% (cpu_spread.CAP_PCT), and a doubling on
    the crowded side, at the other regions' pace, measured +74% and -42% here (session 33), so a clean-clone CI
    run whose crowding inflated kv.append_token's CPU time less than the median region's left it within."""
    crowded, quiet = _run(store, "crowded"), _run(store, "quiet")
    planted = _planted_cpu(crowded, 2 * crowded.step_cpu[KV], np.ones_like(crowded.step_roll))
    for before, after, side, word in (
        (quiet, planted, "after", "slower"),
        (planted, quiet, "before", "faster"),
    ):
        metrics, v = _decide(before, after)
        d = v["decision"]
        assert d["slower_machine"] == side, d["slowdown"]
        assert [(r["label"], r["word"]) for r in _code_rows(d)] == [(KV, word)], _why(metrics, d)
        assert decision.by_cpu_time(_code_rows(d)[0]) and v["overall"] == word
        assert f"{KV} " in headline_sentence(v) and machine_line(v).startswith(
            f"the machine was slower in {side}"
        )
        gated = [m["name"] for m in decision.gate(metrics, d, 10.0, None)]
        assert gated == ([f"regions.{KV}.cpu_own_p5_ns"] if word == "slower" else []), gated


def test_the_machine_rule_is_the_same_both_ways(store):
    """Deterministic, on one real capture: the before side's wall times doubled (its CPU times as recorded) is the
    machine in before, worded so, the figures faster (machine), overall no clear change; the same with the CPU times
    doubled too is the code: after is faster. And the after side doubled is the machine in after, as before."""
    quiet = _run(store, "quiet")
    _, v = _decide(_waited(quiet, 2.0), quiet)
    d = v["decision"]
    assert d["slower_machine"] == "before" and d["slowdown"]["wall_pct"] < -45
    step = next(r for r in v["headline"] if r["metric"] == "steps.p50_ns")
    assert step["word"] == "faster" and step["machine"]
    assert v["overall"] == "no clear change"
    assert headline_sentence(v).startswith("no clear change in the code")
    assert machine_line(v).startswith("the machine was slower in before")
    _, v = _decide(_waited(quiet, 2.0, cpu_factor=2.0), quiet)
    assert v["decision"]["slower_machine"] is None and v["overall"] == "faster"
    metrics, v = _decide(quiet, _waited(quiet, 2.0))
    assert v["decision"]["slower_machine"] == "after"
    assert machine_line(v).startswith("the machine was slower in after")
    assert decision.gate(metrics, v["decision"], 10.0, None) == []


def _why(metrics: list[dict], decision_: dict) -> dict:
    """What an assertion on the code's rows prints (a decision's rows are too long for pytest's message): the
    regions' CPU p5 figures, their intervals and floors, and the region rows' words."""
    cpu = {
        m["name"]: [
            round(m[k], 1) if m.get(k) is not None else None
            for k in ("delta_pct", "ci_low_pct", "ci_high_pct")
        ]
        + [m.get("floor_pct")]
        for m in metrics
        if m["name"].startswith("regions.") and m["name"].endswith(".cpu_own_p5_ns")
    }
    rows = [
        {k: r.get(k) for k in ("label", "word", "delta_pct", "widened_pct", "machine")}
        for r in decision_["rows"]
        if r["kind"] == "region"
    ]
    return {"cpu p5 [delta, low, high, floor]": cpu, "region rows": rows}


def _beyond_widened(row: dict, metrics: list[dict]) -> bool:
    """Whether a region row of the code's interval clears its floor widened by the other regions' spread in the same
    diff (cpu_spread.py; its floor from its metric: a region row of the verdict's has none of its own)."""
    m = next(m for m in metrics if m["name"] == row["metric"])
    spread = cpu_spread.spread_pct(metrics, row["metric"])
    widened = m["floor_pct"] if spread is None else cpu_spread.widened_floor_pct(m["floor_pct"], spread)
    return noise_floor.clears(m["ci_low_pct"], m["ci_high_pct"], widened)


def _planted_cpu(run, extra_ns: float, where):
    """The same capture with extra_ns more of kv.append_token's own CPU time (and as much wall time) in the steps
    `where` picks ([S] bool): more work in it there, as --no-batched-rollover does at the rollover steps."""
    out = copy.deepcopy(run)
    add = np.where(where, extra_ns, 0.0)
    out.step_cpu = {**run.step_cpu, KV: run.step_cpu[KV] + add}
    out.step_regions = {**run.step_regions, KV: run.step_regions[KV] + add}
    per_step, outside = run.step_self[KV]
    out.step_self = {**run.step_self, KV: (per_step + add, outside)}
    out.step_dur = run.step_dur + add
    return out


def test_work_added_at_rollover_steps_is_named_by_its_cpu_time_there(store):
    """On a real capture with ~18 rollover steps a run: 1 ms more of kv.append_token's CPU work in the rollover
    steps alone is named `at rollover steps` by its CPU time there (the metric the row is judged by), slower, gated.
    The same 1 ms in every step is not a change of the rollover path (named over all the steps instead)."""
    run = _run(store, "small-blocks")
    assert run.step_roll.sum() >= 10, run.step_roll.sum()
    metrics, v = _decide(run, _planted_cpu(run, 1e6, run.step_roll))
    rows = [r for r in v["decision"]["rows"] if r["kind"] == "region" and r["label"] == KV]
    assert [(r["at_rollover"], r["metric"], r["word"]) for r in rows] == [
        (True, CPU_AT_ROLLOVER, "slower")
    ], rows
    assert CPU_AT_ROLLOVER in [m["name"] for m in decision.gate(metrics, v["decision"], 10, None)]
    assert f"{KV} at rollover steps +" in headline_sentence(v) and "median own CPU time" in headline_sentence(
        v
    )
    _, v = _decide(run, _planted_cpu(run, 1e6, np.ones_like(run.step_roll)))
    assert not [r for r in v["decision"]["rows"] if r.get("at_rollover")], v["decision"]["rows"]


def test_rollover_steps_that_waited_in_one_side_are_not_named(store):
    """The rollover steps alone waited four times as long in wall time in the after side (a machine's waits that
    landed there: its CPU time as recorded): the rollover path's CPU time did not move, and the region is not named
    slower by it."""
    run = _run(store, "small-blocks")
    after = copy.deepcopy(run)
    after.step_regions = {k: np.where(run.step_roll, v * 4, v) for k, v in run.step_regions.items()}
    _, v = _decide(run, after)
    m = next(m for m in compare(run, after, floor=NoiseFloor("cpu")) if m["name"] == CPU_AT_ROLLOVER)
    assert m["delta_pct"] == pytest.approx(0.0) and not m["significant"]
    assert not [r for r in v["decision"]["rows"] if r.get("metric") == CPU_AT_ROLLOVER]


def test_a_region_slower_by_its_cpu_time_on_a_slower_machine_is_named_beside_the_machine(store):
    """Deterministic, on one real capture: the after side ran on a machine twice as slow (every wall time doubled,
    the CPU times as recorded) and kv.append_token does 300 µs more CPU work a step (as --no-batched-kv-append
    does): the wall-clock figures are the machine's (said in the first lines, never gated), and the region is the
    code's, named slower by its CPU time and gated. Before session 22 the region hid the machine: the step's +100%
    read as the code's too."""
    quiet = _run(store, "quiet")
    after = _waited(_planted_cpu(quiet, 3e5, np.ones_like(quiet.step_roll)), 2.0)
    metrics, v = _decide(quiet, after)
    d = v["decision"]
    assert d["slower_machine"] == "after", d["slowdown"]
    code = _code_rows(d)
    assert [(r["kind"], r["label"], r["word"]) for r in code] == [("region", KV, "slower")], code
    assert decision.by_cpu_time(code[0])
    assert [r for r in d["rows"] if r["metric"].startswith(decision.WALL_FIGURES)], d["rows"]
    assert all(r["machine"] for r in d["rows"] if r["metric"].startswith(decision.WALL_FIGURES))
    assert v["overall"] == "slower"
    assert machine_line(v).startswith("the machine was slower in after")
    assert "the regions named are judged by their CPU time" in machine_line(v)
    assert f"{KV} +" in headline_sentence(v) and "(the machine, not the code)" in headline_sentence(v)
    assert [m["name"] for m in decision.gate(metrics, d, 10.0, None)] == [code[0]["metric"]]
    # the same work planted with the wall time doubled and the CPU time too: the code, all of it
    _, v = _decide(
        quiet, _waited(_planted_cpu(quiet, 3e5, np.ones_like(quiet.step_roll)), 2.0, cpu_factor=2.0)
    )
    assert v["decision"]["slower_machine"] is None


def test_a_sentence_never_parts_a_number_from_its_unit(store):
    """The headline and the machine's line of a real decision (the one above), wrapped at every width from 40 to
    80 columns as the terminal prints them: no line longer than the width, the words as they were, and never a
    number at one line's end with its unit at the next's start (`(+417.5` / `µs p5 own CPU time per step)`, seen
    in a same-code pair's diff)."""
    from roseprof.render.terminal_diff import with_units

    quiet = _run(store, "quiet")
    _, v = _decide(quiet, _waited(_planted_cpu(quiet, 3e5, np.ones_like(quiet.step_roll)), 2.0))
    assert re.search(r"\d (µs|ms)", headline_sentence(v)), headline_sentence(v)  # a number with its unit
    for sentence in (headline_sentence(v), machine_line(v)):
        for width in range(40, 81):
            lines = with_units(sentence, width).splitlines()
            assert all(len(line) <= width for line in lines), (width, lines)
            assert " ".join(lines).split() == sentence.split()
            for a, b in zip(lines, lines[1:]):
                assert not (re.search(r"\d$", a) and re.match(r"(ns|µs|ms|s|tok/s)\b", b)), (width, a, b)


# Every statistic a region's row of the metrics table can name at 80 columns (render/terminal_diff.COMPACT's words)
STATISTICS = {"time", "self", "self p5", "cpu", "cpu p5", "cpu p5 raw", "calls", "time/run", "self/run",
              "outside/run", "roll mean", "roll p50", "roll cpu", "norm mean", "norm p50", "norm cpu"}  # fmt: skip
# a metrics table row: ` name · statistic` (or `name·statistic` where the spaces did not fit), then its figures
LABEL = re.compile(r"^ (\S+?)(?: · |·)(.*?)\s+[\d-]")


def test_at_80_columns_a_region_keeps_one_short_name_and_its_whole_statistic(store):
    """The metrics table at 80 columns, led by the longest region names' statistics in the rollover and the other
    steps (a real diff's rows, quiet against small-blocks, whose ~18 rollover steps a run give those rows
    intervals): each name is shortened one way in the whole output, and its statistic stays whole (it was cut to
    `rollover m…`: mean or p50?, and in a clean-clone CI run with a mark column to `norm me…`)."""
    from rich.console import Console

    from roseprof.render.terminal_diff import print_diff

    view = api.diff_runs(
        RunStore(store / "traces"), ["quiet"], ["small-blocks"], 10, None, False, latest=True
    )
    result = view.result
    longest = sorted({m["name"].rsplit(".", 1)[-1] for m in result["metrics"] if "block_tables" in m["name"]})
    assert longest, [m["name"] for m in result["metrics"]][:20]
    lead = [m for m in result["metrics"] if m["name"].startswith("steps.") and "block_tables" in m["name"]]
    assert len(lead) >= 6, lead  # mean and p50 in rollover and other steps, of both block-table regions
    result["metrics"] = lead + [m for m in result["metrics"] if m not in lead]
    # the narrowest room: a mark column (a figure the machine's: a CI run's tail had waited) and a wide change
    result["metrics"][len(lead)].update(machine=True, ci_low_pct=153.2, ci_high_pct=1108.9)
    console = Console(width=80, record=True, force_terminal=False)
    print_diff(console, result, top=25)
    out = console.export_text()
    assert all(len(line) <= 80 for line in out.splitlines())
    table = out[out.index("all metrics") :].splitlines()
    rows = [LABEL.match(line) for line in table if "·" in line]
    assert len(rows) >= len(lead) and all(rows), table
    names: dict[str, set] = {}
    for row in rows:
        name, what = row.groups()
        assert what in STATISTICS, row.group(0)
        names.setdefault(name.removeprefix("…").rsplit(".", 1)[-1], set()).add(name)
    # one short form per region name in this output (its last component tells it)
    assert all(len(forms) == 1 for forms in names.values()), names
    assert "roll / norm: in the rollover steps / in the other steps" in " ".join(out.split())
