"""ITL spike attribution: synthetic step logs (every number known) and a real engine run that injects each cause."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from roseprof.analysis.spike_evidence import step_region_excess
from roseprof.analysis.spikes import analyse_spikes, attribute
from roseprof.workload.steplog import StepLogRecords, read_steplog

MS = 1_000_000


def synthetic(step_ms, batch=4, rollovers=None, prefills=(), gc=(), version=1):
    """A step log of decode steps back to back (step k takes step_ms[k]), every request in every step, each
    emitting its token at the step's end."""
    steps, t = [], 0
    for k, d in enumerate(step_ms):
        steps.append(
            {
                "type": "step",
                "index": k,
                "start_ns": t,
                "end_ns": t + int(d * MS),
                "batch_size": batch,
                "rollovers": (rollovers or {}).get(k, 0),
                "cow": 0,
                "requests": list(range(batch)),
            }
        )
        t += int(d * MS) + 10_000
    requests = [
        {
            "id": r,
            "arrival_ns": 0,
            "token_ns": [0] + [s["end_ns"] for s in steps],
            "token_step": [-1] + list(range(len(steps))),
        }
        for r in range(batch)
    ]
    return StepLogRecords(
        meta={"version": version} if version > 1 else {},
        steps=steps,
        prefills=list(prefills),
        requests=requests,
        gc=list(gc),
    )


def test_identical_steps_have_no_spikes():
    summary, causes, _ = analyse_spikes(synthetic([10.0] * 200), None, [], None)
    assert summary["spike_tokens"] == 0 and summary["causes"] == []
    assert all(c is None for per_request in causes for c in per_request)
    # Ordinary jitter (2%) is no spike either: the floor is 25% over the median.
    jitter = 10.0 * (1 + np.random.default_rng(0).normal(0, 0.02, 200))
    assert analyse_spikes(synthetic(jitter.tolist()), None, [], None)[0]["spike_tokens"] == 0


def test_a_slow_rollover_step_is_a_rollover_spike():
    step_ms = [10.0] * 100
    step_ms[40] = 30.0
    summary, causes, _ = analyse_spikes(synthetic(step_ms, rollovers={40: 4}), None, [], None)
    assert summary["spike_tokens"] == 4 and summary["spike_steps"] == 1
    (entry,) = summary["causes"]
    assert entry["cause"] == "rollover" and entry["share_pct"] == 100
    assert entry["added_p50_ms"] == pytest.approx(20.0, rel=0.01)
    assert causes[0][40] == "rollover" and causes[0][39] is None
    assert summary["listed"][0]["step"] == 40 and summary["listed"][0]["step_record"]["rollovers"] == 4


def test_prefill_gc_and_a_slow_step_each_explain_their_spike():
    step_ms = [10.0] * 100
    # Step 20's window holds a 15 ms prefill before it; step 60's a 12 ms collection (version 2); step 80 is slow
    # with nothing else in the log: the step itself took the time (without a trace, no region to name).
    log = synthetic(step_ms)
    for k, extra in ((20, 15), (60, 12)):
        for s in log.steps[k:]:
            s["start_ns"] += extra * MS
            s["end_ns"] += extra * MS
    log.steps[80]["end_ns"] += 25 * MS
    for s in log.steps[81:]:
        s["start_ns"] += 25 * MS
        s["end_ns"] += 25 * MS
    for r in log.requests:
        r["token_ns"] = [0] + [s["end_ns"] for s in log.steps]
    t20 = log.steps[19]["end_ns"] + 20_000
    log.prefills.append({"start_ns": t20, "end_ns": t20 + 15 * MS, "tokens": 100, "requests": [9], "cow": 0})
    t60 = log.steps[59]["end_ns"] + 20_000
    log.gc.append({"start_ns": t60, "end_ns": t60 + 12 * MS, "generation": 2, "collected": 5})
    summary, causes, _ = analyse_spikes(log, None, [], None)
    by_cause = {c["cause"]: c for c in summary["causes"]}
    assert set(by_cause) == {"prefill", "gc", "slow_step"}  # nothing is unknown: a record explains each
    assert by_cause["prefill"]["added_p50_ms"] == pytest.approx(15, rel=0.05)
    assert by_cause["gc"]["added_p50_ms"] == pytest.approx(12, rel=0.05)
    assert by_cause["slow_step"]["added_p50_ms"] == pytest.approx(25, rel=0.05)
    assert (causes[0][20], causes[0][60], causes[0][80]) == ("prefill", "gc", "slow_step")
    # Each cause comes with its evidence: the event, or the step, that took the time.
    assert by_cause["gc"]["evidence"][0]["where"] == "Python gc collections"
    assert by_cause["slow_step"]["evidence"][0]["where"] == "decode step 80 (no trace to say where)"
    assert all(c["tokens"] == 4 for c in summary["causes"])  # one main cause per spike token


def test_a_step_cause_takes_what_it_typically_costs_and_a_slow_step_the_rest():
    # Rollovers every 16 steps cost 5 ms each; step 96 rolled over and was also slowed by 200 ms that the log does
    # not record (a sleep). The rollover keeps its typical 5 ms; the rest is a slower step, whose evidence names
    # the step (with a trace: the region that grew), not the rollover.
    step_ms = [10.0] * 200
    rollovers = {k: 2 for k in range(16, 200, 16)}
    for k in rollovers:
        step_ms[k] = 15.0
    step_ms[96] = 215.0
    summary, causes, _ = analyse_spikes(synthetic(step_ms, rollovers=rollovers), None, [], None)
    listed = {e["step"]: e for e in summary["listed"]}
    assert listed[96]["causes"]["rollover"] == pytest.approx(5.0, rel=0.01)
    assert listed[96]["causes"]["slow_step"] == pytest.approx(200.0, rel=0.01)
    assert listed[96]["main"] == {
        "cause": "slow_step",
        "where": "decode step 96 (no trace to say where)",
        "ms": 200.0,
    }
    assert causes[0][96] == "slow_step" and causes[0][16] == causes[0][112] == "rollover"
    by_cause = {c["cause"]: c for c in summary["causes"]}
    assert by_cause["rollover"]["tokens"] == 4 * (len(rollovers) - 1) and by_cause["slow_step"]["tokens"] == 4
    assert by_cause["rollover"]["added_p50_ms"] == pytest.approx(5.0, rel=0.01)


def test_a_batch_change_that_costs_nothing_takes_no_sleep_planted_in_its_step():
    # The batch alternates between 4 and 3 sequences every 25 steps at no cost; step 100, a change, also slept 400 ms.
    # Its tokens' main cause is the slower step: the batch change typically costs nothing in this run.
    step_ms = [10.0] * 200
    step_ms[100] = 410.0
    log = synthetic(step_ms)
    for s in log.steps:
        s["batch_size"] = 4 if (s["index"] // 25) % 2 == 0 else 3
    summary, causes, _ = analyse_spikes(log, None, [], None)
    (entry,) = summary["causes"]
    assert entry["cause"] == "slow_step" and entry["tokens"] == 4
    assert entry["added_p50_ms"] == pytest.approx(400.0, rel=0.01)
    assert entry["evidence"][0]["where"] == "decode step 100 (no trace to say where)"
    (spike,) = summary["listed"]
    assert spike["step"] == 100 and spike["causes"]["batch_change"] < 1e-3  # found there, added nothing
    tok, costs = attribute(log)
    changed = np.isin(tok["step"], [k for k in range(1, 200) if k % 25 == 0])
    assert ((costs["batch_change"] > 0) == changed).all()  # still found wherever the batch changed


def test_a_cause_dear_in_a_third_of_its_steps_keeps_its_cost_there():
    # Rollovers every 4th step; every 3rd of them costs 20 ms more (a third of the rollovers). What a rollover costs
    # is read at the 75th percentile of the other rollover steps, not their median: the dear ones stay rollovers.
    step_ms = [10.0] * 200
    rollovers = {k: 1 for k in range(4, 200, 4)}
    for i, k in enumerate(rollovers):
        step_ms[k] = 30.0 if i % 3 == 0 else 10.0
    summary, causes, _ = analyse_spikes(synthetic(step_ms, rollovers=rollovers), None, [], None)
    (entry,) = summary["causes"]
    assert entry["cause"] == "rollover" and entry["added_p50_ms"] == pytest.approx(20.0, rel=0.01)


def test_a_causes_cost_scales_with_its_units():
    # A rollover of one sequence costs 0.5 ms, every 4th step; one of 30 sequences, every 30th step, costs 15 ms: the
    # same per sequence, so the large ones are rollovers too, not slower steps.
    step_ms = [10.0] * 210
    rollovers = {k: 1 for k in range(2, 210, 4)}
    rollovers.update({k: 30 for k in range(30, 210, 30)})
    for k, n in rollovers.items():
        step_ms[k] = 10.0 + 0.5 * n
    summary, _, _ = analyse_spikes(synthetic(step_ms, rollovers=rollovers), None, [], None)
    (entry,) = summary["causes"]
    assert entry["cause"] == "rollover" and entry["tokens"] == 4 * 6
    assert entry["added_p50_ms"] == pytest.approx(15.0, rel=0.01)


def test_the_step_that_slept_never_sets_its_own_causes_cost():
    # Two batch changes in the run: step 50's cost nothing, step 100's also slept 400 ms. Step 100's own time does
    # not say what a batch change costs (the other one does), so the sleep is a slower step.
    step_ms = [10.0] * 200
    step_ms[100] = 410.0
    log = synthetic(step_ms)
    for s in log.steps[50:100]:
        s["batch_size"] = 3
    summary, causes, _ = analyse_spikes(log, None, [], None)
    (entry,) = summary["causes"]
    assert entry["cause"] == "slow_step" and entry["added_p50_ms"] == pytest.approx(400.0, rel=0.01)
    assert causes[0][100] == "slow_step"


def test_causes_that_come_together_are_given_their_cost_once():
    # A rollover and a copy-on-write together, in every 10th step, cost 6 ms between them; step 100's pair also
    # slept 100 ms. The pair explains its 6 ms (3 each, by their own costs, which are the pair's), not 12.
    step_ms = [10.0] * 200
    rollovers = {k: 1 for k in range(10, 200, 10)}
    for k in rollovers:
        step_ms[k] = 16.0
    step_ms[100] = 116.0
    log = synthetic(step_ms, rollovers=rollovers)
    for k in rollovers:
        log.steps[k]["cow"] = 1
    summary, _, _ = analyse_spikes(log, None, [], None)
    listed = {e["step"]: e for e in summary["listed"]}
    assert listed[100]["causes"]["rollover"] == pytest.approx(3.0, rel=0.01)
    assert listed[100]["causes"]["cow"] == pytest.approx(3.0, rel=0.01)
    assert listed[100]["causes"]["slow_step"] == pytest.approx(100.0, rel=0.01)
    assert listed[20]["causes"].get("slow_step", 0) < 1e-3


def test_a_log_whose_later_tokens_all_came_from_prefills_has_no_step_causes():
    # No decode step at all (every token after the first a prefill's: recomputed requests): nothing to cap, no error.
    log = StepLogRecords(
        meta={},
        steps=[],
        prefills=[{"start_ns": 0, "end_ns": 5 * MS, "tokens": 8, "requests": [0], "cow": 0}],
        requests=[
            {
                "id": 0,
                "arrival_ns": 0,
                "token_ns": [0, 10 * MS, 20 * MS, 90 * MS],
                "token_step": [-1, -1, -1, -1],
            }
        ],
        gc=[],
    )
    tok, costs = attribute(log)
    assert len(tok["end"]) == 3 and all(
        not (costs[c] > 0).any() for c in ("rollover", "batch_change", "slow_step")
    )
    assert analyse_spikes(log, None, [], None)[0]["tokens"] == 3


@pytest.fixture(scope="module")
def engine_log(tmp_path_factory):
    path = tmp_path_factory.mktemp("spikes") / "steplog.jsonl"
    script = Path(__file__).with_name("spike_engine_run.py")
    proc = subprocess.run([sys.executable, script, path], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return read_steplog(str(path))


def test_every_injected_cause_is_found_where_it_happened(engine_log):
    log = engine_log
    tok, costs = attribute(log)
    step = tok["step"]
    # Each cause happened in this run (the step log's own records say so).
    rollover_steps = {s["index"] for s in log.steps if s["rollovers"]}
    preempted = {r["id"] for r in log.requests if r.get("preemptions")}
    assert rollover_steps and preempted and len(log.prefills) >= 6
    assert any(p["cow"] for p in log.prefills)
    # Rollovers: exactly the tokens of the steps that rolled over.
    for k in {int(s) for s in step if s >= 0}:
        at = step == k
        assert (costs["rollover"][at] > 0).all() == (k in rollover_steps), k
    # Batch changes: exactly where the step's batch differs from the previous step's.
    sizes = [s["batch_size"] for s in log.steps]
    for k in {int(s) for s in step if s > 0}:
        assert (costs["batch_change"][step == k] > 0).all() == (sizes[k] != sizes[k - 1]), k
    # Prefills: every token whose window holds a prefill has it (new or re-admission), no other token does.
    holds = np.zeros(len(step), dtype=bool)
    cow_window = np.zeros(len(step), dtype=bool)
    for p in log.prefills:
        inside = (tok["start"] < p["end_ns"]) & (p["start_ns"] < tok["end"])
        holds |= inside
        if p["cow"]:
            cow_window |= (tok["start"] <= p["start_ns"]) & (p["end_ns"] <= tok["end"])
    assert ((costs["prefill"] + costs["readmission"]) > 0).tolist() == holds.tolist()
    assert cow_window.any() and ((costs["cow"] > 0) == cow_window).all()
    # Re-admission: the prefill that recomputed a preempted request.
    assert (costs["readmission"] > 0).any()
    # The preempted request waited for KV blocks; nobody else did.
    waited = np.isin(tok["request"], list(preempted)) & (costs["kv_wait"] > 0)
    assert waited.any() and not ((costs["kv_wait"] > 0) & ~np.isin(tok["request"], list(preempted))).any()
    # The step after a preemption has the preemption.
    assert (costs["preemption"] > 0).any()
    # Python's gc (log version 2): every token whose window holds a recorded collection.
    if log.version >= 2:
        assert log.gc
        for g in log.gc:
            within = (tok["start"] <= g["start_ns"]) & (g["end_ns"] <= tok["end"])
            assert (costs["gc"][within] > 0).all()


def test_engine_run_summary_is_json_and_consistent(engine_log):
    summary, causes, _ = analyse_spikes(engine_log, None, [], None)
    json.dumps(summary, allow_nan=False)
    assert summary["tokens"] == sum(len(r["token_ns"]) - 1 for r in engine_log.requests)
    assert sum(c is not None for per in causes for c in per) == summary["spike_tokens"]
    for c in summary["causes"]:
        assert 0 < c["tokens"] <= summary["spike_tokens"] and c["added_total_ms"] >= 0


def _region_rows(dur, **regions):
    rows = {"dur_ns": dur, "index": list(range(len(dur)))}
    rows.update({f"region:{name}": values for name, values in regions.items()})
    return rows, list(regions), [{"start_ns": 0, "end_ns": d} for d in dur]


def test_a_slow_step_whose_regions_all_shrank_is_spread_over_the_step_not_a_crash():
    # Step 4 took 100 ns over the median while each region took less than its own median (and b no time at all):
    # no region grew to name. A live server's window had such a step, and `min()` of no regions ended
    # `roseprof live` in a traceback.
    nan = float("nan")
    rows, cols, steps = _region_rows(
        [100, 100, 100, 100, 200], a=[50, 50, 50, 50, 40], b=[30, 30, 30, 30, nan]
    )
    assert step_region_excess(rows, cols, steps) == {4: ("(spread over the step)", 100.0)}
    # the region that did grow is still the one named
    rows, cols, steps = _region_rows(
        [100, 100, 100, 100, 200], a=[50, 50, 50, 50, 140], b=[30, 30, 30, 30, 20]
    )
    assert step_region_excess(rows, cols, steps) == {4: ("a", 90.0)}
