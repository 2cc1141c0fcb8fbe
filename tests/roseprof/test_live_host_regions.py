"""A slow decode step's region named from the step log's own host time of each region (step log version 4): what a
GPU engine's steps window has, where the thread's CPU time is not recorded. The words and the spike causes from
logs built here, then `roseprof live` against a real CPU server whose planted slowdown is a sleep (host time, no
CPU time), so the region can only be named the way a GPU run names it."""

from __future__ import annotations

import json

import pytest

from roseprof.analysis.spike_evidence import STEP_EVIDENCE
from roseprof.analysis.spikes import analyse_spikes
from roseprof.analysis.steps import cpu_columns, cpu_regions
from roseprof.live.join import Explainer, RegionGrowth
from roseprof.workload.steplog import read_steplog
from tests.helpers import roseprof
from tests.roseprof.test_live import live_of_a_slowed_server
from tests.roseprof.test_spikes import MS, synthetic

STEP = "roseinfer.decode_step"
SAMPLE = "roseinfer.sample"
ENV = {"COLUMNS": "80"}


def _slow_step_log(slow: int = 80, cpu: bool = False, grew_cpu: bool = False):
    """100 decode steps of 10 ms; step `slow` takes 20 ms more, all of it in the decode step region's own host
    time (and, with `grew_cpu`, its CPU time too)."""
    step_ms = [10.0] * 100
    step_ms[slow] = 30.0
    log = synthetic(step_ms, version=4)
    for k, s in enumerate(log.steps):
        extra = 20 * MS if k == slow else 0
        s["host_own_ns"] = {STEP: 1 * MS + extra, SAMPLE: 9 * MS}
        if cpu:
            s["cpu_ns"] = 10 * MS + (extra if grew_cpu else 0)
            s["cpu_own_ns"] = {STEP: 1 * MS + (extra if grew_cpu else 0), SAMPLE: 9 * MS}
    return log


def test_a_slow_step_is_named_by_its_regions_host_time():
    log = _slow_step_log()
    words = Explainer(log, 0).step_words("slow_step", 80)
    said = f"{STEP} +20.0 ms of host time over its median (30.0 ms step)"
    assert words == f"step 80: slower decode step (30.0 ms); {said}"
    assert RegionGrowth(log).at(79) is None  # a normal step names nothing


def test_cpu_times_first_then_host_time():
    """A CPU engine on one thread logs both: a region whose CPU time grew is named by it; one that waited (a
    sleep, a lock: no CPU time) by its host time."""
    assert RegionGrowth(_slow_step_log(cpu=True, grew_cpu=True)).at(80) == (STEP, 20.0, "CPU")
    assert RegionGrowth(_slow_step_log(cpu=True, grew_cpu=False)).at(80) == (STEP, 20.0, "of host time")


def test_growth_spread_over_the_regions_names_none():
    log = _slow_step_log()
    # +6, +7 and +7 ms: no region took half of the step's 20 ms
    log.steps[80]["host_own_ns"] = {STEP: 7 * MS, SAMPLE: 16 * MS, "roseinfer.argmax": 7 * MS}
    assert RegionGrowth(log).at(80) is None
    assert Explainer(log, 0).step_words("slow_step", 80).endswith("nothing in the log says why)")
    # The step also rolled over (the cause took what rollovers cost elsewhere): the words say the step is slower
    # beyond that, not that the log says nothing.
    log.steps[80]["rollovers"] = 3
    words = Explainer(log, 0).step_words("slow_step", 80)
    assert words.endswith("beyond what its rollover of 3 sequences cost in other steps)"), words


def test_steps_without_region_times_are_not_counted_as_free():
    """Regions on for part of the window (a torch window's steps): the medians are of the steps that have times."""
    log = _slow_step_log()
    for s in log.steps[:60]:
        del s["host_own_ns"]
    assert RegionGrowth(log).at(80) == (STEP, 20.0, "of host time")
    assert RegionGrowth(log).at(10) is None


def test_the_spike_causes_name_the_region_without_a_trace():
    summary, causes, _ = analyse_spikes(_slow_step_log(), None, [], None)
    by_cause = {c["cause"]: c for c in summary["causes"]}
    assert causes[0][80] == "slow_step"
    (evidence,) = by_cause["slow_step"]["evidence"]
    assert evidence["where"] == f"{STEP} (host)" and evidence["p50_ms"] == pytest.approx(20, rel=0.05)


def test_host_times_never_become_cpu_columns():
    """A GPU engine's log (host times, no CPU times): the steps table gets no `cpu:` columns, so nothing that judges
    code by CPU time (diffs, analysis/machine_speed.py) reads a GPU run's host time as CPU work."""
    log = _slow_step_log()
    rows: dict = {}
    cpu_columns(rows, log.steps, range(len(log.steps)))
    assert cpu_regions(rows) == [] and "cpu_ns" not in rows
    cpu_columns(rows, _slow_step_log(cpu=True).steps, range(100))  # a CPU engine's: its CPU times only
    assert sorted(cpu_regions(rows)) == sorted([SAMPLE, STEP]) and rows[f"cpu:{STEP}"][80] == 1 * MS


def test_a_step_with_damaged_host_times_is_kept_without_them(tmp_path):
    step = {"type": "step", "start_ns": 0, "end_ns": 10, "batch_size": 1}
    lines = [
        {"type": "meta", "version": 4},
        {**step, "index": 0, "host_own_ns": {STEP: 4}},
        {**step, "index": 1, "start_ns": 20, "end_ns": 30, "host_own_ns": {STEP: -1}},
        {**step, "index": 2, "start_ns": 40, "end_ns": 50, "host_own_ns": [4]},
    ]
    path = tmp_path / "steps.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    log = read_steplog(path)
    assert len(log.steps) == 3 and log.steps[0]["host_own_ns"] == {STEP: 4}
    assert not any("host_own_ns" in s for s in log.steps[1:])
    assert log.problems["repaired: damaged host times dropped from a step"] == 2


def test_a_step_with_a_damaged_wait_for_a_core_is_kept_without_it(tmp_path):
    step = {
        "type": "step",
        "start_ns": 0,
        "end_ns": 10,
        "batch_size": 1,
        "cpu_ns": 4,
        "cpu_own_ns": {STEP: 4},
    }
    lines = [
        {"type": "meta", "version": 5},
        {**step, "index": 0, "wait_ns": 3},
        {**step, "index": 1, "start_ns": 20, "end_ns": 30, "wait_ns": -1},
        {**step, "index": 2, "start_ns": 40, "end_ns": 50, "wait_ns": "3"},
    ]
    path = tmp_path / "steps.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    log = read_steplog(path)
    assert len(log.steps) == 3 and log.steps[0]["wait_ns"] == 3
    assert not any("wait_ns" in s for s in log.steps[1:])
    assert all(s["cpu_own_ns"] == {STEP: 4} for s in log.steps)  # the step's CPU times stay
    assert log.problems["repaired: a damaged wait for a core dropped from a step"] == 2
    # a steps table has the waits only where every step has them: a hole would pass a missing wait for none
    rows: dict = {}
    cpu_columns(rows, log.steps, range(3))
    assert "wait_ns" not in rows and rows["cpu_ns"] == [4, 4, 4]
    cpu_columns(rows, log.steps, [0])
    assert rows["wait_ns"] == [3]


def _live_with_a_planted_sleep(tmp_path, sleep_ms: int, *server_args: str) -> tuple:
    """`roseprof live` of a server whose decode-step region sleeps `sleep_ms` on one entry in 50: (run folder,
    summary, the request named first by its worst ITL)."""
    env = {"ROSEINFER_TEST_SLEEP_REGION": f"{STEP}:{sleep_ms}", "ROSEINFER_TEST_SLOW_EVERY": "50"}
    folder, summary, worst = live_of_a_slowed_server(tmp_path, env, "host", *server_args)
    # the 50th, 100th, ... entry of the region: steps 49, 99, ...
    assert worst["step"] % 50 == 49, summary["live"]["slowest"]
    assert f"{STEP} +" in worst["line"] and "ms of host time over its median" in worst["line"], worst
    return folder, summary, worst


def test_live_names_a_region_by_its_host_time_one_in_50(tmp_path):
    """The decode-step region made slow by a sleep (host time, no CPU time) on one decode step in 50 of a real CPU
    server: `roseprof live` names those steps' requests first, blamed on that region's host time; `roseprof
    request` says it under the step, and `show`'s spike causes name it too."""
    # 400 ms: far above what a busy box's scheduling adds to any other step (150 ms was not, once)
    folder, summary, worst = _live_with_a_planted_sleep(tmp_path, 400)
    request = roseprof("request", folder.name, worst["request_id"], "--traces-dir", tmp_path, env=ENV)
    assert request.returncode == 0, request.stderr
    lines = request.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if line.split()[3:4] == [str(worst["step"])])
    assert lines[at + 1].strip().startswith(f"{STEP} +") and "of host time" in lines[at + 1]
    # The planted steps' tokens go to a step cause (slow_step: a batch change or rollover on a planted step takes
    # only what it typically costs in the run, the sleep is the step's own), so the step cause that added most is
    # theirs, and the region it names first is the slowed one.
    step_causes = [c for c in summary["spikes"]["causes"] if c["cause"] in STEP_EVIDENCE]
    assert step_causes, summary["spikes"]["causes"]
    most = max(step_causes, key=lambda c: c["added_total_ms"])
    assert most["evidence"][0]["where"].endswith(f"{STEP} (host)"), summary["spikes"]["causes"]


@pytest.mark.gpu
def test_a_gpu_servers_steps_window_names_the_region(tmp_path):
    """The real path: a CUDA-graph server (no CPU times on a GPU) names the slowed region by its host time."""
    gpu = ("--device", "cuda", "--dtype", "float16", "--paged-attn", "--cuda-graph")
    _live_with_a_planted_sleep(tmp_path, 50, *gpu)
