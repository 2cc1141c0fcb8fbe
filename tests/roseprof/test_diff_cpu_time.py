"""Where the time moved on a busy CPU, by each region's own thread CPU time (step log version 3): the reader, the
steps table's CPU columns, and the diff that judges regions by them where every run has them (else by the p5 of
their wall own time, as before)."""

import json

import numpy as np
import pytest

from roseprof.analysis.diff import compare
from roseprof.analysis.noise_floor import NoiseFloor, family
from roseprof.analysis.steps import cpu_columns, cpu_regions
from roseprof.analysis.verdict import verdict
from roseprof.workload.steplog import read_steplog
from tests.roseprof.test_diff_stats import run_data

KV = "roseinfer.kv.append_token"
SIDES = {"id": "a", "name": "before", "runs": ["a"]}, {"id": "b", "name": "after", "runs": ["b"]}
OWN_US = {KV: 400, "roseinfer.lm_head": 3700, "roseinfer.layer.attention": 1500, "roseinfer.layer.mlp": 400}


def test_the_reader_keeps_cpu_times_and_drops_only_damaged_ones(tmp_path):
    step = {"type": "step", "index": 0, "start_ns": 10, "end_ns": 20, "batch_size": 1, "requests": [1]}
    good = {**step, "cpu_ns": 9, "cpu_own_ns": {KV: 4, "roseinfer.decode_step": 5}}
    damaged = [
        {**step, "cpu_ns": 9, "cpu_own_ns": {KV: -1}},
        {**step, "cpu_ns": "9", "cpu_own_ns": {KV: 4}},
        {**step, "cpu_own_ns": {KV: 4}},  # half of them
        {**step, "cpu_ns": 9, "cpu_own_ns": [4]},
    ]
    path = tmp_path / "steps.jsonl"
    # Six steps of their own (a record repeating another's index, start and end is dropped as a copy).
    steps = [
        {**r, "index": i, "start_ns": 10 + 20 * i, "end_ns": 20 + 20 * i}
        for i, r in enumerate([good, *damaged, step])
    ]
    lines = [{"type": "meta", "version": 3}, *steps]
    path.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    log = read_steplog(str(path))
    assert len(log.steps) == 6 and log.version == 3  # every step kept: the join with the trace is by order
    assert log.steps[0]["cpu_ns"] == 9 and log.steps[0]["cpu_own_ns"][KV] == 4
    assert not any("cpu_ns" in s or "cpu_own_ns" in s for s in log.steps[1:])
    assert log.problems["repaired: damaged CPU times dropped from a step"] == 4
    # The steps table gets CPU columns only when every step has them (a hole would read as a free step).
    rows = {"dur_ns": [10] * 6}
    cpu_columns(rows, log.steps, range(6))
    assert cpu_regions(rows) == []
    cpu_columns(rows, log.steps, [0, 0])
    assert sorted(cpu_regions(rows)) == sorted([KV, "roseinfer.decode_step"]) and rows["cpu_ns"] == [9, 9]


def _busy_runs(cpu: bool, seed: int = 7):
    """Two runs of a 7.5 ms CPU step, 300 steps: in the after run every region waits 5 ms for a core in 97% of
    its steps (so even the wall time's p5 carries waits), and the KV append's work grew 1.5x. The CPU time holds
    the work and no wait; `cpu=False`: runs captured without CPU times."""
    rng = np.random.default_rng(seed)
    before, after = run_data([7.5e6] * 300), run_data([7.5e6] * 300)
    for name, us in OWN_US.items():
        work = us * 1e3 * rng.lognormal(0, 0.05, size=(2, 300))  # [2 runs, S] ns
        waits = np.where(rng.random(300) < 0.97, 5e6, 0.0)  # [S] ns
        grown = work[1] * (1.5 if name == KV else 1.0)
        for run, own, wall in ((before, work[0], work[0]), (after, grown, grown + waits)):
            run.step_self[name] = (wall, 0.0)
            run.region_durations[name] = wall  # one instance a step
            run.step_regions[name] = wall
            if cpu:
                run.step_cpu[name] = own
    return before, after


def test_a_diff_with_cpu_times_names_the_region_whose_work_grew():
    before, after = _busy_runs(cpu=True)
    metrics = compare(before, after, floor=NoiseFloor("cpu"))
    by = {m["name"]: m for m in metrics}
    assert family(f"regions.{KV}.cpu_own_p5_ns") == family(f"regions.{KV}.cpu_own_ns")
    assert family(f"regions.{KV}.cpu_own_ns") == "region CPU own time per step"
    assert by[f"regions.{KV}.cpu_own_p5_ns"]["delta_pct"] == pytest.approx(50, abs=10)
    v = verdict(metrics, *SIDES)
    assert [r["label"] for r in v["regions"]] == [KV]
    assert v["regions"][0]["own_stat"] == "CPU time, p5 of the steps" and v["moved_most"]["label"] == KV


def test_runs_without_cpu_times_fall_back_to_the_wall_time():
    before, after = _busy_runs(cpu=True)
    after.step_cpu = {}  # one side captured before step log version 3: no CPU metric at all
    metrics = compare(before, after, floor=NoiseFloor("cpu"))
    assert not any(".cpu_own" in m["name"] for m in metrics)
    v = verdict(metrics, *SIDES)
    assert v["regions"] and {r["own_stat"] for r in v["regions"]} == {"p5 of the steps"}
    # Waits in nearly every step reach the wall time's p5 too: it names regions that only waited, ahead of the
    # one that grew (what the CPU time avoids, above).
    assert v["regions"][0]["label"] != KV and KV in [r["label"] for r in v["regions"]]


def test_a_gpu_diff_keeps_judging_the_mean():
    before, after = _busy_runs(cpu=True)
    for run in (before, after):
        run.kernel_durations["gemv_kernel"] = np.full(300, 5e3)  # launched kernels: a GPU diff
        run.kernel_own["gemv_kernel"] = run.kernel_durations["gemv_kernel"]  # no overlap: own time = duration
    metrics = compare(before, after, floor=NoiseFloor("gpu"))
    assert not any(".cpu_own" in m["name"] or ".self_p5_ns" in m["name"] for m in metrics)
    assert {r["own_stat"] for r in verdict(metrics, *SIDES)["regions"]} <= {"mean"}


def test_a_move_that_only_the_speed_normalisation_makes_is_not_named():
    """The after group's Python ran 30% slower (every Python-bound region's CPU time), the BLAS-bound lm_head not:
    at the before side's speed lm_head reads ~23% faster, at the runs' own speed it did not move; the Python-bound
    regions read slower only at the runs' own speed. Nothing changed in the code: nothing is named."""
    rng = np.random.default_rng(3)
    python_bound = {
        KV: 400,
        "roseinfer.layer.attention": 1500,
        "roseinfer.embedding": 40,
        "roseinfer.sample": 20,
    }
    before, after = run_data([7.5e6] * 300), run_data([7.5e6] * 300)
    for name, us in {**python_bound, "roseinfer.lm_head": 3700}.items():
        work = us * 1e3 * rng.lognormal(0, 0.03, size=(2, 300))  # [2 runs, S] ns
        slower = 1.3 if name in python_bound else 1.0
        for run, own in ((before, work[0]), (after, work[1] * slower)):
            run.step_self[name] = (own, 0.0)
            run.region_durations[name] = own
            run.step_regions[name] = own
            run.step_cpu[name] = own
    by = {m["name"]: m for m in compare(before, after, floor=NoiseFloor("cpu"))}
    assert by["regions.roseinfer.lm_head.cpu_own_p5_ns"]["significant"]  # the normalisation's artefact
    assert not by["regions.roseinfer.lm_head.cpu_own_p5_raw_ns"]["excludes_zero"]
    assert by[f"regions.{KV}.cpu_own_p5_raw_ns"]["significant"]  # the machine's, at the runs' own speed
    assert not by[f"regions.{KV}.cpu_own_p5_ns"]["significant"]
    assert verdict(list(by.values()), *SIDES)["regions"] == []
