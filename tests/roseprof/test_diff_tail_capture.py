"""Issue 44: a tail that waited is the machine's, a tail that slept in one region or did more work is the code's
(tail_waits.py, decision.tail_waited), on a real CPU capture of the engine (the session's default, nsys;
engine_captures.py) against the same capture with a tail planted in every TAIL_EVERY-th decode step.

Planted in the stored samples, not by a second capture: two captures of a shared box have tails of their own (a
default capture at load 8 had its slowest steps at 72.6 ms of wall on 28.8 ms of CPU against a median step of
39.7 ms; a second capture with the engine stopped 30 ms every 80 ms by SIGSTOP had a smaller tail than it, 61.7 ms
on 27.6 ms: docs/BENCHMARKS.md session 25), so which side's tail is larger would be the box's choice. The planted
steps are what the machine's waits do (a wait in the region that was running, drawn by its share of the step's wall
time, as a stopped process's), what a sleep in kv.append_token does, and what more work there does; the diff and
the renderers then read them as they read any capture."""

import copy

import numpy as np
import pytest

from roseprof.analysis import decision, tail_waits
from roseprof.render.verdict_text import headline_sentence, machine_line
from tests.roseprof.engine_captures import copy_store
from tests.roseprof.test_diff_decision import _decide, _runs

pytestmark = pytest.mark.nsys

KV = "roseinfer.kv.append_token"
TAIL_EVERY = 10  # 14 of the capture's 138 decode steps: its p95 steps and beyond are all planted
WAIT_NS = 200e6  # larger than any wait of the busy box's own (the default capture's slowest step: 86 ms)


@pytest.fixture(scope="module")
def default(engine_captures, tmp_path_factory):
    return _runs(copy_store(engine_captures, tmp_path_factory.mktemp("tail")), "default")


def _planted(run, tail: str):
    """The capture with WAIT_NS more wall time in every TAIL_EVERY-th decode step (and in its tokens' ITL): "waits"
    in the region that was running (drawn by its own wall time in that step), "sleep" in kv.append_token, "work"
    in kv.append_token's wall and CPU time."""
    out = copy.deepcopy(run)
    rng = np.random.default_rng(0)
    names = sorted(out.step_self)
    for k in range(TAIL_EVERY // 2, len(out.step_dur), TAIL_EVERY):
        if tail == "waits":
            own = np.array([out.step_self[n][0][k] for n in names])
            name = names[rng.choice(len(names), p=own / own.sum())]
        else:
            name = KV
        out.step_self[name][0][k] += WAIT_NS
        out.step_regions[name][k] += WAIT_NS
        out.step_dur[k] += WAIT_NS
        if tail == "waits" and out.step_wait is not None:  # a wait for a core, as the kernel counts it
            out.step_wait[k] += WAIT_NS
        out.itl[out.itl_step == k] += WAIT_NS / 1e6
        if tail == "work":
            out.step_cpu[name][k] += WAIT_NS
    return out


def test_a_tail_of_waits_is_the_machines(default):
    """The slowest steps took 200 ms more wall time on the same CPU time, waiting wherever the engine was: the tail
    figures that moved are the machine's, said in the first lines with the slowest steps' wall and CPU time, and
    the gate passes."""
    metrics, v = _decide(default, _planted(default, "waits"))
    d = v["decision"]
    t = d["slowdown"]["tail"]
    assert t["wall_pct"] > 100 and abs(t["cpu_pct"]) < decision.CPU_SHARE * t["wall_pct"], t
    assert not tail_waits.one_place(t["after"]), t
    moved = [r for r in d["rows"] if r["kind"] == "figure" and r["word"] == "slower"]
    assert "itl.p95_ms" in [r["metric"] for r in moved], d["rows"]
    assert all(decision.is_tail(r["metric"]) for r in moved), d["rows"]  # the median step did not move
    assert d["tail_waits"] == "after" and all(r["machine"] for r in moved)
    assert v["overall"] == "no clear change"
    assert headline_sentence(v).startswith("no clear change in the code — "), headline_sentence(v)
    line = machine_line(v)
    assert line.startswith("the machine was slower in after's slowest steps, not the code: "), line
    assert "ITL p95 +" in line and "step mean +" in line, line  # the figures it explains, by name
    assert "ms of wall on" in line and "ms of CPU in after" in line, line
    if (
        default.step_wait is not None
    ):  # the kernel's run delay (step log version 5): the waits counted, not placed
        assert abs(t["unwaited_pct"]) < decision.CPU_SHARE * t["wall_pct"], t
        assert "less their waits for a core" in line, line
    decision.mark(metrics, d)
    assert decision.gate(metrics, d, 10.0, None) == []
    assert next(m for m in metrics if m["name"] == "itl.p95_ms")[
        "machine"
    ]  # the table marks it the machine's


@pytest.mark.parametrize("tail", ["sleep", "work"])
def test_a_tail_slept_in_one_region_or_of_more_work_is_the_codes(default, tail):
    """The same 200 ms, slept in kv.append_token every time (waits in one place) or spent there (CPU time grown
    with the wall time): the code's, named slower and gated."""
    metrics, v = _decide(default, _planted(default, tail))
    d = v["decision"]
    t = d["slowdown"]["tail"]
    if tail == "sleep":
        assert t["after"]["place"] == KV and tail_waits.one_place(t["after"]), t
    else:
        assert t["cpu_pct"] >= decision.CPU_SHARE * t["wall_pct"] > 0, t
    assert d["tail_waits"] is None and not any(r["machine"] for r in d["rows"]), d["rows"]
    assert v["overall"] == "slower" and machine_line(v) is None
    assert headline_sentence(v).startswith("after is slower — "), headline_sentence(v)
    decision.mark(metrics, d)
    assert "itl.p95_ms" in [m["name"] for m in decision.gate(metrics, d, 10.0, None)]
