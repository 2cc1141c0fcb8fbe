"""Issue 44: a tail figure that only the slowest steps' waits moved is the machine's, not the code's
(analysis/tail_waits.py, decision.tail_waited). Runs built on the CPU demo's regions (test_diff_crowded_cpu.CROWDED)
whose median steps are alike and whose slowest 3% of steps differ: waits landing in whichever region runs (the
machine's: a same-code pair of docs/BENCHMARKS.md session 24 read `ITL p99 +75.5% slower`, its slowest steps 48-58 ms
of wall on 21-27 ms of CPU), a sleep in one region at those steps, or more CPU work there (what --no-batched-rollover
does at its rollover steps). tests/roseprof/test_diff_tail_capture.py checks the rule on real captures."""

import numpy as np
import pytest

from roseprof.analysis import decision, tail_waits
from roseprof.render.verdict_text import headline_sentence, machine_line
from tests.roseprof.test_diff_crowded_cpu import CROWDED, KV, _decide
from tests.roseprof.test_diff_stats import run_data

STEPS = 300
TAIL = 9  # the slowest 3% of the steps
WAIT_NS = 30e6  # 30 ms a slow step, as pair 2's: ~2.5x the median step


def _run(seed: int, tail: str | None = None):
    """STEPS decode steps of the demo's regions (each its quiet CPU time per step, its wall time 2% more), one token
    a step; in TAIL steps, `tail`: "waits" (WAIT_NS of wall time in one region drawn by its share of the step, as a
    wait for a core lands), "sleep" (WAIT_NS of wall time in kv.append_token each time) or "work" (WAIT_NS of CPU
    and wall time in kv.append_token)."""
    rng = np.random.default_rng(seed)
    names = list(CROWDED)
    cpu = np.array([us * 1e3 * rng.lognormal(0, 0.03, STEPS) for us, _ in CROWDED.values()])  # [N, S] ns
    wall = cpu * 1.02  # [N, S] ns
    slow = rng.choice(STEPS, TAIL, replace=False)  # [TAIL] step indices
    if tail == "waits":
        share = np.array([us for us, _ in CROWDED.values()], dtype=float)
        where = rng.choice(len(names), TAIL, p=share / share.sum())  # [TAIL] region index
        wall[where, slow] += WAIT_NS
    elif tail in ("sleep", "work"):
        wall[names.index(KV), slow] += WAIT_NS
        if tail == "work":
            cpu[names.index(KV), slow] += WAIT_NS
    step = wall.sum(axis=0)  # [S] ns
    run = run_data(step.tolist(), itl_ms=(step / 1e6).tolist())
    for i, name in enumerate(names):
        run.step_self[name] = (wall[i], 0.0)
        run.region_durations[name] = wall[i]
        run.step_regions[name] = wall[i]
        run.step_cpu[name] = cpu[i]
    return run


def _machine_figures(d) -> list[str]:
    return [r["metric"] for r in d["rows"] if r["kind"] == "figure" and r["machine"]]


@pytest.mark.parametrize("waited", ["after", "before"])
def test_a_tail_of_waits_is_the_machines_said_first_and_never_gated(waited):
    """Waits in after's (or before's) slowest steps alone: the step and ITL p99 move beyond their floors, the median
    step does not, the slowest steps' CPU time does not grow. The tail figures are the machine's: starred, in the
    headline as the machine's, said with the slowest steps' wall and CPU time in the machine's line, never gated."""
    quiet, busy = _run(1), _run(2, "waits")
    before, after = (quiet, busy) if waited == "after" else (busy, _run(3))
    metrics, v = _decide(before, after)
    d = v["decision"]
    tail = d["slowdown"]["tail"]
    assert d["tail_waits"] == waited and not d["machine_slower"], (tail, d["rows"])
    word = "slower" if waited == "after" else "faster"
    assert {"steps.p99_ns", "itl.p99_ms"} <= set(_machine_figures(d)), d["rows"]
    assert all(r["word"] == word for r in d["rows"] if r["machine"])
    assert v["overall"] == "no clear change"
    assert headline_sentence(v).startswith("no clear change in the code — ")
    assert f"{word} (the machine, not the code)" in headline_sentence(v)
    line = machine_line(v)
    assert line.startswith(f"the machine was slower in {waited}'s slowest steps, not the code: "), line
    assert "ms of wall on" in line and "ms of CPU in after" in line, line
    assert decision.gate(metrics, d, 10.0, None) == []
    starred = {m["name"] for m in metrics if m["significant"]}
    assert {"steps.p99_ns", "itl.p99_ms"} <= starred  # visible, marked as the verdict's (the machine's)
    # the evidence: after's slowest steps' wall grew (or shrank) by far more than their CPU time
    assert abs(tail["cpu_pct"]) < 5 and abs(tail["wall_pct"]) > 50, tail


def test_a_sleep_in_one_region_at_the_slowest_steps_is_the_codes():
    """The same wall time without CPU time, but in kv.append_token at every slow step (a sleep, a lock): the waits
    are in one place, so the tail figures stay the code's, named slower and gated."""
    metrics, v = _decide(_run(1), _run(2, "sleep"))
    d = v["decision"]
    t = d["slowdown"]["tail"]
    assert t["after"]["place"] == KV and tail_waits.one_place(t["after"]), t
    assert d["tail_waits"] is None and not _machine_figures(d)
    assert v["overall"] == "slower" and machine_line(v) is None
    assert "itl.p99_ms" in {m["name"] for m in decision.gate(metrics, d, 10.0, None)}


def test_more_work_at_the_slowest_steps_is_the_codes():
    """The slowest steps' CPU time grew with their wall time (more work there, as the unbatched rollover's): the
    code's, named slower and gated."""
    metrics, v = _decide(_run(1), _run(2, "work"))
    d = v["decision"]
    t = d["slowdown"]["tail"]
    assert t["cpu_pct"] > decision.CPU_SHARE * t["wall_pct"] > 0, t
    assert d["tail_waits"] is None and not _machine_figures(d)
    assert v["overall"] == "slower"
    assert "itl.p99_ms" in {m["name"] for m in decision.gate(metrics, d, 10.0, None)}
