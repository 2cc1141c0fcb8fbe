"""Issue 44: "the machine was slower" is said only where a wall-clock figure moved beyond its floor
(decision.machine_slower). Session 23's pair r2 (docs/BENCHMARKS.md) printed `the machine was slower in before:
the step's wall time -0.5% while the regions' CPU time per step moved +7.6%` beside kv.append_token named by its
CPU time: the figures' ratios held the machine's rule with nothing for it to explain. Runs built from those
figures: every region's CPU time +7.6% in after (kv.append_token's 1.6x, the README's A/B), before's steps 12%
longer than their CPU time (waits for a core) and after's 1.6%: the step's wall time -0.5%."""

import numpy as np
import pytest

from roseprof.analysis import decision
from roseprof.render.verdict_text import headline_sentence, machine_line
from tests.roseprof.test_diff_crowded_cpu import CROWDED, KV, _decide
from tests.roseprof.test_diff_stats import run_data

STEPS = 300


def _run(seed: int, cpu_factor: float, kv_factor: float, waits: float):
    """STEPS decode steps: each region's CPU time per step (its quiet figure times cpu_factor, kv.append_token's
    times kv_factor too) and its wall time, `waits` longer (a wait for a core)."""
    rng = np.random.default_rng(seed)
    run = run_data([1.0] * STEPS)
    step = np.zeros(STEPS)
    for name, (us, _) in CROWDED.items():
        cpu = (
            us * 1e3 * cpu_factor * rng.lognormal(0, 0.03, STEPS) * (kv_factor if name == KV else 1.0)
        )  # [S] ns
        wall = cpu * (1.0 + waits * rng.uniform(0.8, 1.2, STEPS))  # [S] ns
        run.step_self[name] = (wall, 0.0)
        run.region_durations[name] = wall
        run.step_regions[name] = wall
        run.step_cpu[name] = cpu
        step += wall
    run.step_dur = step
    return run


def test_the_machine_is_not_said_where_no_wall_clock_figure_moved():
    """Wall -0.5%, CPU +9.7%: the ratios alone hold the machine's rule for before (swapped: wall +0.5%, the speed
    factor +2.5%, CPU -8.9%), but no wall-clock figure cleared its floor, so there is nothing of the machine's to
    say: no machine line, no `the code` hedge; kv.append_token named slower and gated as before."""
    before, after = _run(1, 1.0, 1.0, 0.12), _run(2, 1.076, 1.6, 0.0156)
    metrics, v = _decide(before, after)
    d = v["decision"]
    assert abs(d["slowdown"]["wall_pct"]) < 2 and d["slowdown"]["cpu_pct"] > 7, d["slowdown"]
    s = decision.swapped(d["slowdown"])  # the figures' ratios hold the rule for before (what it used to say)
    assert 0 < s["wall_pct"] < 2 and s["speed_pct"] >= decision.ALIKE * s["wall_pct"], s
    assert s["cpu_pct"] < decision.CPU_SHARE * s["wall_pct"], s
    assert not decision.wall_clock_grew(d["rows"]) and not decision.wall_clock_grew(
        decision.mirrored(d["rows"])
    )
    assert d["slower_machine"] is None and not d["machine_slower"], d["slowdown"]
    assert machine_line(v) is None
    assert [(r["label"], r["word"]) for r in d["rows"] if r["word"] in decision.DIRECTIONS] == [
        (KV, "slower")
    ]
    assert headline_sentence(v).startswith(
        "after is slower — steps: no clear change; roseinfer.kv.append_token +"
    )
    assert [m["name"] for m in decision.gate(metrics, d, 10.0, None)] == [f"regions.{KV}.cpu_own_p5_ns"]


@pytest.mark.parametrize("slower_side", ["before", "after"])
def test_the_machine_is_said_where_the_wall_time_moved_beyond_its_floor(slower_side):
    """The same regions with one side's steps waiting twice their CPU time (wall +170% or -63%): a wall-clock
    figure beyond its floor that the machine explains, said in the first lines; kv.append_token still the code's
    (its CPU time), named and gated where after is its slower side."""
    quiet, busy = _run(1, 1.0, 1.0, 0.0), _run(2, 1.076, 1.6, 2.0)
    before, after = (busy, _run(3, 1.0, 1.0, 0.0)) if slower_side == "before" else (quiet, busy)
    metrics, v = _decide(before, after)
    d = v["decision"]
    if slower_side == "before":  # the busier side is before and its code the slower (kv 1.6x): after faster
        assert d["slower_machine"] == "before" and d["slowdown"]["wall_pct"] < -50, d["slowdown"]
        assert machine_line(v).startswith("the machine was slower in before")
        assert [(r["label"], r["word"]) for r in d["rows"] if r["kind"] == "region"] == [(KV, "faster")]
        assert decision.gate(metrics, d, 10.0, None) == []
    else:
        assert d["slower_machine"] == "after" and d["slowdown"]["wall_pct"] > 100, d["slowdown"]
        assert machine_line(v).startswith("the machine was slower in after")
        assert [m["name"] for m in decision.gate(metrics, d, 10.0, None)] == [f"regions.{KV}.cpu_own_p5_ns"]
    assert any(r["machine"] for r in d["rows"] if r["kind"] == "figure")  # the figures it explains
