"""Each region's own host (wall) time per decode step, in the step log while regions are on, on every device
(tracing._StepTimes, step log version 4): what `roseprof live` names a slow step's region by on a GPU engine,
where the thread's CPU time is not recorded (tracing.STATE.step_cpu is for CPU engines on one thread)."""

import gc
import json
import time

import pytest
import torch

from roseinfer import LLM, SamplingParams, steplog, tracing

SLEEP_MS = 5


@pytest.fixture
def logged(monkeypatch, tmp_path):
    """Runs an engine with a step log in tmp_path, a sleep planted in a region (ROSEINFER_TEST_SLEEP_REGION) and the
    region clocks on always (ROSEINFER_REGION_CLOCKS; nothing else on: no profiler); returns its step records."""
    path = tmp_path / "steps.jsonl"
    monkeypatch.setenv("ROSEINFER_STEP_LOG", str(path))
    threads = torch.get_num_threads()

    def run(sleep_region: str, **options) -> list[dict]:
        monkeypatch.setenv("ROSEINFER_TEST_SLEEP_REGION", f"{sleep_region}:{SLEEP_MS}")
        monkeypatch.setenv("ROSEINFER_REGION_CLOCKS", "1")
        tracing.configure(nvtx=False, record_function=False)
        assert tracing.STATE.clocks  # the switch turns the clocks on, as NVTX or a profiler would
        path.unlink(missing_ok=True)
        llm = LLM("gpt2-tiny", max_batch_size=4, **options)
        # No garbage collection during the steps: one that starts inside a region is that region's CPU time (a
        # few ms in a test process that has run hundreds of tests; most likely what session 61's CI read once: 5.9 ms
        # of CPU in `sample`, whose planted sleep of 5 ms takes none), which is not what these tests are about
        collecting = gc.isenabled()
        gc.disable()
        try:
            llm.generate([[1, 2, 3]] * 3, SamplingParams(max_new_tokens=6, ignore_eos=True))
        finally:
            if collecting:
                gc.enable()
        steplog.close()
        records = [json.loads(line) for line in path.read_text().splitlines()]
        assert records[0]["version"] == 5
        return [r for r in records if r["type"] == "step"]

    yield run
    steplog.close()
    monkeypatch.delenv("ROSEINFER_TEST_SLEEP_REGION")
    monkeypatch.delenv("ROSEINFER_REGION_CLOCKS", raising=False)
    monkeypatch.delenv("ROSEINFER_STEP_LOG")
    tracing.configure(nvtx=False, record_function=False)
    torch.set_num_threads(threads)


def test_a_step_records_each_regions_own_host_time_without_cpu_times(monkeypatch):
    """The GPU engine's path (step_cpu off): a sleep in a nested region is its own host time, not its parent's,
    and the own times add up to the step region's wall time; no CPU time is read."""
    monkeypatch.setattr(tracing.STATE, "enabled", True)
    monkeypatch.setattr(tracing.STATE, "clocks", True)
    monkeypatch.setattr(tracing.STATE, "step_cpu", False)
    tracing.take_step_times()
    now = time.perf_counter_ns
    t0 = now()
    with tracing.region(tracing.DECODE_STEP):
        a0 = now()
        with tracing.region(tracing.SAMPLE):
            with tracing.region(tracing.ARGMAX):
                time.sleep(0.02)
        with tracing.region(tracing.SAMPLE):  # a second entry adds to the first's
            time.sleep(0.01)
        a1 = now()
    wall = now() - t0
    times = tracing.take_step_times()
    assert set(times) == {"host_own_ns"}
    own = times["host_own_ns"]
    assert set(own) == {tracing.DECODE_STEP, tracing.SAMPLE, tracing.ARGMAX}
    assert own[tracing.ARGMAX] >= 20_000_000
    assert own[tracing.SAMPLE] >= 10_000_000  # both entries' own time: at least the second's sleep
    # not its child's: the two sample entries and the argmax inside them are disjoint parts of a0..a1 (bounds
    # measured around them, so a busy machine's late wake-ups cannot fail it)
    assert own[tracing.SAMPLE] + own[tracing.ARGMAX] <= a1 - a0
    assert own[tracing.DECODE_STEP] >= 0
    assert sum(own.values()) <= wall  # the step region's wall time, inside what was measured around it
    assert tracing.take_step_times() == {}  # taken once


def test_on_one_thread_both_under_their_own_keys(logged):
    """A CPU engine on one thread logs both: the planted sleep is its region's host time in every step (its own,
    not its child's), and no CPU time (what diffs judge). (On two threads only the host times:
    test_region_cpu.py's test_an_engine_on_several_threads_leaves_them_out.)"""
    steps = logged(tracing.SAMPLE, cpu_threads=1)
    assert steps
    for step in steps:
        host, cpu = step["host_own_ns"], step["cpu_own_ns"]
        assert host[tracing.SAMPLE] >= SLEEP_MS * 1_000_000
        assert host[tracing.ARGMAX] < SLEEP_MS * 1_000_000  # the sleep sits in `sample` itself
        assert cpu[tracing.SAMPLE] < SLEEP_MS * 1_000_000
        assert set(cpu) == set(host)
        assert sum(host.values()) <= step["end_ns"] - step["start_ns"]
        assert tracing.PREFILL not in host and tracing.SCHEDULER_STEP not in host


@pytest.mark.gpu
def test_a_cuda_graph_engine_logs_host_times(logged):
    """The real path: CUDA graphs, regions on; each step has its regions' host times and no CPU times."""
    steps = logged(tracing.DECODE_STEP, device="cuda", dtype="float16", cuda_graph=True, paged_attn=True)
    assert not tracing.STATE.step_cpu
    assert steps
    for step in steps:
        assert "cpu_own_ns" not in step
        assert step["host_own_ns"][tracing.DECODE_STEP] >= SLEEP_MS * 1_000_000
        assert sum(step["host_own_ns"].values()) <= step["end_ns"] - step["start_ns"]


def test_a_planted_slowdown_alone_times_no_region(monkeypatch, tmp_path):
    """The test switches slow a region and turn no clock on (a slowed server is a plain server); the clocks are on
    for the steps run between set_region_clocks(True) and set_region_clocks(False), and only for those."""
    path = tmp_path / "steps.jsonl"
    monkeypatch.setenv("ROSEINFER_STEP_LOG", str(path))
    monkeypatch.setenv("ROSEINFER_TEST_SLEEP_REGION", f"{tracing.SAMPLE}:1")
    tracing.configure(nvtx=False, record_function=False)
    try:
        assert tracing.STATE.enabled and not tracing.STATE.clocks
        llm = LLM("gpt2-tiny", max_batch_size=4)
        params = SamplingParams(max_new_tokens=4, ignore_eos=True)
        llm.generate([[1, 2, 3]], params)  # 3 decode steps, clocks off
        assert tracing.set_region_clocks(True) is False
        llm.generate([[1, 2, 3]], params)  # 3 more, clocks on
        assert tracing.set_region_clocks(False) is True
        llm.generate([[1, 2, 3]], params)  # 3 more, off again
        steplog.close()
        steps = [r for r in map(json.loads, path.read_text().splitlines()) if r["type"] == "step"]
        assert [("host_own_ns" in s) for s in steps] == [False] * 3 + [True] * 3 + [False] * 3
        assert all(s["host_own_ns"][tracing.SAMPLE] >= 1_000_000 for s in steps[3:6])  # the sleep, timed
    finally:
        steplog.close()
        tracing.set_region_clocks(False)
        monkeypatch.delenv("ROSEINFER_TEST_SLEEP_REGION")
        monkeypatch.delenv("ROSEINFER_STEP_LOG")
        tracing.configure(nvtx=False, record_function=False)
