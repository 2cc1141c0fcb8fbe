"""The GPU's work per decode step as a figure of the diff's decision (sections/kernels.GPU_KERNEL_P50): a profiled
batch-1 GPU step is host-bound, so a kernel path that got slower moves no wall-clock figure; the kernels' summed
time per step does, and the diff must say slower, gate on it, and stay quiet on same code."""

import numpy as np

from roseprof.analysis import noise_floor
from roseprof.analysis.decision import gate
from roseprof.analysis.diff_metric import Sides
from roseprof.analysis.noise_floor import NoiseFloor
from roseprof.analysis.run_data import RunData
from roseprof.analysis.sections.kernels import GPU_KERNEL_P50, gpu_kernel_time
from roseprof.analysis.verdict import verdict

RANKS = {"gpu_time": {"ranks": [{"rank": 0}]}}


def _run(
    kernels: dict[str, float], steps: int = 200, seed: int = 0, summary=RANKS, overlap: float = 0.0
) -> RunData:
    """A GPU run whose steps launch each kernel once, its time per step about `kernels[name]` ns (1% noise), one
    after another on one stream, or with `overlap` of their summed time running beside one another (two streams)."""
    rng = np.random.default_rng(seed)
    own = {k: (ns * (1 + 0.01 * rng.standard_normal(steps)), 0.0) for k, ns in kernels.items()}
    dur = np.full(steps, 490_000.0) * (
        1 + 0.02 * rng.standard_normal(steps)
    )  # host-bound: the step hides them
    busy = np.sum([v[0] for v in own.values()], axis=0) * (
        1 - overlap
    )  # [S] the union of each step's kernels
    return RunData(
        dict(summary),
        step_dur=dur,
        kernel_steps=own,
        kernel_durations={k: v[0] for k, v in own.items()},
        step_gpu_busy=busy,
    )


def _verdict(before: list[RunData], after: list[RunData], one_run: bool = False) -> dict:
    sides = Sides(before, after, np.random.default_rng(3))
    metrics = gpu_kernel_time(sides)
    sides.intervals()
    noise_floor.apply(metrics, NoiseFloor("gpu", one_run=one_run))
    assert [m["floor_pct"] for m in metrics] == [10.0]
    return verdict(metrics, {"id": "a"}, {"id": "b"})


def test_a_kernel_path_that_got_slower_is_named_and_gated_though_the_step_did_not_move():
    # the planted regression of docs/BENCHMARKS.md session 26: the fused attention kernel replaced by three
    # Triton/GEMV launches, +38 µs of a 152 µs GPU step
    before = [
        _run({"fused_attn": 68_000.0, "fused_mlp": 60_000.0, "lm_head": 24_000.0}, seed=s) for s in (1, 2, 3)
    ]
    after = [_run({"gemv": 106_000.0, "fused_mlp": 60_000.0, "lm_head": 24_000.0}, seed=s) for s in (4, 5, 6)]
    v = _verdict(before, after)
    (row,) = v["decision"]["rows"]
    assert (row["metric"], row["word"], v["overall"]) == (GPU_KERNEL_P50, "slower", "slower")
    assert 20 < row["delta_pct"] < 30
    (headline,) = v["headline"]
    assert headline["label"] == "GPU work p50" and headline["samples"] == "steps"
    assert [m["name"] for m in gate([{"name": GPU_KERNEL_P50, **row}], v["decision"], 10, None)] == [
        GPU_KERNEL_P50
    ]


def test_one_run_a_side_names_a_change_past_the_group_floor():
    # one run a side has the group's 10% (it had 15%): single same-code H200 captures never reached beyond 0
    # (their intervals within ±0.2%, docs/BENCHMARKS.md session 28), so a kernel path 12% slower is a change there
    kernels = {"fused_attn": 68_000.0, "fused_mlp": 60_000.0}
    slower = {"fused_attn": 83_400.0, "fused_mlp": 60_000.0}  # 128 -> 143.4 µs of kernels a step
    v = _verdict([_run(kernels, seed=1)], [_run(slower, seed=2)], one_run=True)
    (row,) = v["decision"]["rows"]
    assert (row["word"], row["floor_pct"]) == ("slower", 10.0) and 11 < row["delta_pct"] < 13
    same = _verdict([_run(kernels, seed=1)], [_run(kernels, seed=2)], one_run=True)
    assert same["decision"]["rows"] == []


def test_kernels_of_two_streams_side_by_side_count_the_gpus_busy_time():
    # a step whose two halves run on two streams (a graph's parallel branches): each kernel keeps its own stream's
    # time, 30% more in all than the GPU was busy; the figure is the busy time, which did not move
    kernels = {"attention": 68_000.0, "gemm": 60_000.0}
    halves = {"attention": 88_400.0, "gemm": 78_000.0}  # each half's kernels, 30% more summed...
    v = _verdict(
        [_run(kernels, seed=s) for s in (1, 2, 3)], [_run(halves, seed=s, overlap=0.23) for s in (4, 5, 6)]
    )
    (row,) = v["headline"]
    assert row["word"] == "no clear change" and abs(row["delta_pct"]) < 1  # ...for the same busy time
    assert v["decision"]["rows"] == []


def test_same_kernels_are_quiet():
    kernels = {"fused_attn": 68_000.0, "fused_mlp": 60_000.0}
    v = _verdict([_run(kernels, seed=s) for s in (1, 2, 3)], [_run(kernels, seed=s) for s in (4, 5, 6)])
    assert v["decision"]["rows"] == [] and v["headline"][0]["word"] == "no clear change"


def test_no_figure_for_several_gpus_nor_without_kernels_in_the_steps():
    """Several ranks' kernels include their collectives, which also wait for the other ranks (the per-rank figures
    compare those); a CPU run has no kernels; an ncu run's launches have no launch time, so none is in a step."""
    two = {"gpu_time": {"ranks": [{"rank": 0}, {"rank": 1}]}}
    one_gpu, two_gpus = _run({"k": 1000.0}), _run({"k": 600.0}, summary=two)
    assert gpu_kernel_time(Sides([one_gpu], [two_gpus], np.random.default_rng(0))) == []
    assert gpu_kernel_time(Sides([two_gpus], [two_gpus], np.random.default_rng(0))) == []
    cpu = RunData({}, step_dur=np.ones(50))
    assert gpu_kernel_time(Sides([cpu], [cpu], np.random.default_rng(0))) == []
    outside = _run({"k": 0.0})  # its kernels all launched outside the steps: zero in every step
    assert gpu_kernel_time(Sides([one_gpu], [outside], np.random.default_rng(0))) == []
