"""A kernel's own time on its stream (`roseprof.analysis.stream_time`): properties on random streams, and a real
capture of the engine's batch-1 step with programmatic dependent launches (nsys 2025.3 on an H100,
`bash scripts/gpu_check.sh fixture-pdl`), where kernels start while the one before still runs: the per-step breakdown by
capture-time region must add up to each step's busy GPU time, not to the overlapping durations."""

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roseprof.analysis.stream_time import own_stream_ns
from roseprof.analysis.summary import analyse
from roseprof.drivers.nsys.reader import read_nsys_sqlite
from roseprof.model import KERNEL, MEMCPY
from roseprof.workload.steplog import read_steplog
from tests.helpers import assert_fits, packed, roseprof

DATA = Path(__file__).parent.parent / "data" / "nsys"
BASE = "h100-nsys2025.3-roseinfer-pdl"
SQLITE, STEPLOG = DATA / f"{BASE}.sqlite", DATA / f"{BASE}.steplog.jsonl"


class Ops:
    def __init__(self, rows):  # rows: (kind, device, stream, start, end)
        cols = list(zip(*rows)) if rows else [[]] * 5
        self.kind, self.device, self.stream, self.start, self.end = (
            np.asarray(c, dtype=np.int64) for c in cols
        )


def union_ns(start, end) -> int:
    """Length of the union of intervals, by sorting and merging (independent of the implementation)."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted(zip(start.tolist(), end.tolist())):
        if cur_e is None or s > cur_e:
            total += 0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + (0 if cur_e is None else cur_e - cur_s)


interval = st.tuples(
    st.sampled_from([KERNEL, KERNEL, KERNEL, MEMCPY]),
    st.integers(0, 1),  # device
    st.integers(0, 2),  # stream
    st.integers(0, 10_000),  # start
    st.integers(0, 3_000),  # duration
).map(lambda t: (t[0], t[1], t[2], t[3], t[3] + t[4]))


@settings(max_examples=300, deadline=None)
@given(st.lists(interval, max_size=40))
def test_own_time_is_the_stream_union_and_at_most_the_duration(rows):
    ops = Ops(rows)
    own = own_stream_ns(ops)
    dur = ops.end - ops.start
    kernel = ops.kind == KERNEL
    assert (own[~kernel] == 0).all()
    assert ((own >= 0) & (own <= dur)).all()
    for dev, stream in {(r[1], r[2]) for r in rows if r[0] == KERNEL}:
        on = kernel & (ops.device == dev) & (ops.stream == stream)
        assert own[on].sum() == union_ns(ops.start[on], ops.end[on])


def test_own_time_is_the_duration_where_nothing_overlaps():
    ops = Ops([(KERNEL, 0, 7, 0, 10), (KERNEL, 0, 7, 10, 25), (KERNEL, 0, 9, 5, 30), (KERNEL, 1, 7, 3, 9)])
    assert own_stream_ns(ops).tolist() == [10, 15, 25, 6]


def test_a_kernel_started_early_is_charged_from_where_the_one_before_ends():
    # PDL: kernel 2 starts at 8, while kernel 1 runs until 10; kernel 3 lies entirely under kernel 2.
    ops = Ops([(KERNEL, 0, 7, 0, 10), (KERNEL, 0, 7, 8, 20), (KERNEL, 0, 7, 12, 18), (KERNEL, 0, 7, 15, 26)])
    assert own_stream_ns(ops).tolist() == [10, 10, 0, 6]


def test_real_pdl_capture_overlaps_and_its_busy_time_is_the_union():
    trace = read_nsys_sqlite(str(SQLITE))
    ops = trace.ops
    kernel = ops.kind == KERNEL
    own = own_stream_ns(ops)
    dur = (ops.end - ops.start)[kernel]
    # PDL: most kernels of the replayed steps start before the previous one ends
    assert own[kernel].sum() < 0.8 * dur.sum()
    for dev, stream in set(zip(ops.device[kernel].tolist(), ops.stream[kernel].tolist())):
        on = kernel & (ops.device == dev) & (ops.stream == stream)
        assert own[on].sum() == union_ns(ops.start[on], ops.end[on])


def replayed_kernels_by_step(trace, steps):
    """Independently of the analysis: (by_part [S], the steps' graph: columns summed; mine(s) -> [K] the replayed
    kernels whose launch lies inside step s)."""
    by_part = np.sum([np.asarray(steps[c], dtype=np.int64) for c in steps if c.startswith("graph:")], axis=0)
    ops = trace.ops
    start = np.asarray(steps["start_ns"], dtype=np.int64)
    end = start + np.asarray(steps["dur_ns"], dtype=np.int64)
    k = np.flatnonzero((ops.kind == KERNEL) & (ops.api_start >= 0) & (ops.graph_node >= 0))
    step = np.searchsorted(start, ops.api_start[k], side="right") - 1
    inside = (step >= 0) & (ops.api_start[k] <= end[np.maximum(step, 0)])
    return by_part, lambda s: k[inside & (step == s)]


def test_real_pdl_capture_step_regions_add_up_to_busy_time_not_durations():
    trace = read_nsys_sqlite(str(SQLITE))
    summary, tables = analyse(trace, read_steplog(str(STEPLOG)))
    steps = tables["steps"]
    cols = [c for c in steps if c.startswith("graph:")]
    assert {"graph:roseinfer.layer.attention", "graph:roseinfer.layer.mlp", "graph:roseinfer.lm_head"} <= set(
        cols
    )
    # each step's kernels, independently: launched inside the step, their union on the stream
    by_part, kernels_of = replayed_kernels_by_step(trace, steps)
    ops = trace.ops
    launched = np.flatnonzero(by_part > 0)
    assert len(launched) > 40
    durations = 0
    for s in launched:
        mine = kernels_of(s)
        assert by_part[s] == union_ns(ops.start[mine], ops.end[mine]), s
        durations += int((ops.end[mine] - ops.start[mine]).sum())
    assert by_part[launched].sum() < 0.8 * durations  # the durations would have counted the waits
    # the kernel table still reports durations, as nsys does (its stats_cuda_gpu_kern_sum oracle)
    with open(DATA / f"{BASE}.stats_cuda_gpu_kern_sum.csv", newline="") as fh:
        total = sum(int(row["Total Time (ns)"]) for row in csv.DictReader(fh))
    assert abs(sum(x["total_ns"] for x in summary["kernels"]) - total) <= 1e-3 * total


def test_real_pdl_capture_diff_samples_count_each_kernels_own_time():
    # What `roseprof diff` compares as a kernel's time per step: its own time on the stream, so the kernels of a
    # step add up to the step's GPU busy time, and a kernel that starts early under PDL is not charged for its
    # wait (summed durations called the GEMV 35% slower in an H100 diff whose steps got faster: issue 27 round 4).
    from roseprof.analysis.samples import prepare
    from roseprof.analysis.sections import SECTIONS

    trace = read_nsys_sqlite(str(SQLITE))
    summary, tables = analyse(trace, read_steplog(str(STEPLOG)))
    steps = tables["steps"]
    run = prepare(summary, {"rows": steps}, None, trace, SECTIONS)
    per_step = np.sum([v[0] for v in run.kernel_steps.values()], axis=0)  # [S]
    by_part = np.sum(
        [np.asarray(steps[c], dtype=np.float64) for c in steps if c.startswith("graph:")], axis=0
    )
    launched = by_part > 0
    assert launched.sum() > 40 and np.array_equal(per_step[launched], by_part[launched])
    gemv = run.kernel_steps["gemv_kernel"][0][launched].sum()
    durations = run.kernel_durations["gemv_kernel"].sum()
    assert gemv < 0.8 * durations  # nearly every GEMV starts before the kernel before it ends


def test_real_pdl_capture_shown_as_a_user_would(tmp_path):
    store = ["--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path / "dashboards"]
    proc = roseprof("import", SQLITE, "--name", "pdl", "--steplog", STEPLOG, *store)
    assert proc.returncode == 0, proc.stderr
    shown = roseprof("show", "pdl", "--json", *store)
    assert shown.returncode == 0, shown.stderr
    summary = json.loads(shown.stdout)
    regions = summary["steps"]["normal"]["graph_regions"]
    # a step's GPU time by part, each kernel its own time: attention and MLP, then the lm_head (77 MB, ~30 us)
    assert regions["roseinfer.layer.attention"] > regions["roseinfer.lm_head"] > 20_000
    assert 150_000 < sum(regions.values()) < 300_000  # the step's busy time, not its 350 us of durations
    # the steady-state view counts the same way and says how much the durations overlap
    step = summary["steady"]["step"]
    assert step["gpu_mean_ns"] < 0.8 * step["gpu_durations_mean_ns"]
    text = roseprof("show", "pdl", *store, env={"COLUMNS": "80"})
    assert text.returncode == 0, text.stderr
    flat = " ".join(text.stdout.split())
    assert "each kernel's own time on its stream" in flat and "programmatic dependent launch" in flat
    assert_fits(text.stdout, 80)


def test_graph_fixture_without_pdl_has_no_overlap_note(tmp_path):
    # the session-4 capture (plain launches): own time is the duration, nothing to say
    store = ["--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path / "dashboards"]
    base = DATA / "h100-nsys2025.3-roseinfer-graphs"
    proc = roseprof("import", f"{base}.sqlite", "--name", "g", "--steplog", f"{base}.steplog.jsonl", *store)
    assert proc.returncode == 0, proc.stderr
    step = json.loads(roseprof("show", "g", "--json", *store).stdout)["steady"]["step"]
    assert step["gpu_mean_ns"] == step["gpu_durations_mean_ns"]
    assert "own time on its stream" not in roseprof("show", "g", *store, env={"COLUMNS": "80"}).stdout


def test_real_pdl_capture_compared_without_steps_sums_each_kernels_own_time():
    # A run without decode steps (any PDL program without roseinfer's step log) is compared by its kernels' totals
    # per run, and by the kernels only one side has: those too add each launch's own time on its stream, not
    # durations that hold the wait for the kernel before.
    from roseprof.analysis.diff import compare, kernel_changes
    from roseprof.analysis.samples import prepare
    from roseprof.analysis.sections import SECTIONS

    trace = read_nsys_sqlite(str(SQLITE))
    summary, _ = analyse(trace, None)
    run = prepare(summary, None, None, trace, SECTIONS)
    metric = next(m for m in compare(run, run) if m["name"] == "kernels.gemv_kernel.total_ns")
    assert not metric["per_step"]
    gemv = (trace.ops.kind == KERNEL) & (trace.ops.name == trace.names.find("gemv_kernel"))
    own = own_stream_ns(trace.ops)[gemv].sum()
    assert metric["a"] == metric["b"] == pytest.approx(own, rel=1e-9)
    assert own < 0.8 * (trace.ops.end - trace.ops.start)[gemv].sum()
    empty = prepare(summary, None, None, trace, SECTIONS)
    empty.kernel_durations, empty.kernel_own = {}, {}
    assert dict(kernel_changes(empty, run)["new"])["gemv_kernel"] == pytest.approx(own, rel=1e-9)


HALVES = DATA / "h200-nsys2025.3-roseinfer-halves"


def test_real_capture_of_two_graph_branches_counts_each_stream_and_says_the_gpu_busy_time(tmp_path):
    # The fast path at batch 224 (`bash scripts/gpu_check.sh fixture-halves`): the captured step runs as two halves
    # of the batch on two streams, two branches of the graph, and nsys gives each branch's replayed kernels a stream
    # id of their own. Each kernel keeps its own time on its stream, so a step's regions add up to each stream's
    # busy time summed, more than the time the GPU was busy (the union of all its kernels), which show says.
    trace = read_nsys_sqlite(f"{HALVES}.sqlite")
    summary, tables = analyse(trace, read_steplog(f"{HALVES}.steplog.jsonl"))
    steps = tables["steps"]
    by_part, kernels_of = replayed_kernels_by_step(trace, steps)
    ops = trace.ops
    launched = np.flatnonzero(by_part > 0)
    assert len(launched) >= 8
    busy = []
    for s in launched:
        mine = kernels_of(s)
        streams = np.unique(ops.stream[mine])
        assert len(streams) == 2, s  # the replay's stream and the second branch's
        per_stream = [
            union_ns(ops.start[mine][ops.stream[mine] == x], ops.end[mine][ops.stream[mine] == x])
            for x in streams
        ]
        assert by_part[s] == sum(per_stream), s
        busy.append(union_ns(ops.start[mine], ops.end[mine]))
    # the steady steps: all but the first replay (the warm-up, whose halves hardly overlapped)
    assert (
        summary["steady"]["excluded"]["warmup"]["steps"] == 1
        and summary["steady"]["counted"] == len(busy) - 1
    )
    busy, own = np.array(busy[1:]), by_part[launched[1:]]
    assert (busy < 0.8 * own).all()  # the halves ran side by side for much of each step
    step_view = summary["steady"]["step"]
    assert step_view["gpu_busy_mean_ns"] == pytest.approx(busy.mean(), rel=1e-9)
    assert step_view["gpu_mean_ns"] == pytest.approx(own.mean(), rel=1e-9)
    # the kernel table reports durations, as nsys does
    with open(f"{HALVES}.stats_cuda_gpu_kern_sum.csv", newline="") as fh:
        total = sum(int(row["Total Time (ns)"]) for row in csv.DictReader(fh))
    assert abs(sum(x["total_ns"] for x in summary["kernels"]) - total) <= 1e-3 * total
    # as a user sees it
    store = ["--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path / "dashboards"]
    proc = roseprof(
        "import", f"{HALVES}.sqlite", "--name", "halves", "--steplog", f"{HALVES}.steplog.jsonl", *store
    )
    assert proc.returncode == 0, proc.stderr
    text = roseprof("show", "halves", *store, env={"COLUMNS": "80"})
    assert text.returncode == 0, text.stderr
    flat = " ".join(text.stdout.split())
    us = lambda ns: f"{ns / 1e3:,.1f} µs"  # noqa: E731
    assert "streams ran at once" in flat
    assert (
        f"{us(own.mean())} a decode step in the whole-step row), while the GPU was busy {us(busy.mean())}"
        in flat
    )
    assert_fits(text.stdout, 80)
    page = next((tmp_path / "dashboards").glob("*.html")).read_text(encoding="utf-8")
    assert "streams ran at once" in page


@pytest.mark.parametrize(
    "base",
    ["h100-nsys2025.3-roseinfer-pdl", "h100-nsys2025.3-roseinfer-graphs", "h200x2-nsys2025.3-roseinfer-tp2"],
)
def test_steps_whose_kernels_ran_one_stream_at_a_time_have_no_concurrency_note(base):
    # PDL overlaps kernels of one stream only; in the TP run NCCL's streams do not overlap the compute: there a
    # step's busy time is its regions' sum, and nothing is said
    from roseprof.render.text import concurrency_note

    trace = read_nsys_sqlite(packed(DATA / f"{base}.sqlite"))
    summary, _ = analyse(trace, read_steplog(str(DATA / f"{base}.steplog.jsonl")))
    step = summary["steady"]["step"]
    assert step["gpu_busy_mean_ns"] == pytest.approx(step["gpu_mean_ns"], rel=1e-9)
    assert concurrency_note(summary["steady"]) is None


@settings(max_examples=300, deadline=None)
@given(st.lists(interval, max_size=40), st.lists(st.integers(0, 2), min_size=40, max_size=40))
def test_busy_time_is_each_gpus_union_summed_and_at_most_the_own_times(rows, steps):
    # a step's busy time: the union of its kernels on each device (two streams of a GPU at once count once), the
    # GPUs summed
    from roseprof.analysis.gpu_time import busy_by_group

    ops = Ops(rows)
    k = np.flatnonzero(ops.kind == KERNEL)
    group = np.asarray(steps[: len(ops.kind)], dtype=np.int64)
    busy = busy_by_group(group[k], ops.device[k], ops.start[k], ops.end[k], 3)
    own = own_stream_ns(ops)
    for g in range(3):
        mine = k[group[k] == g]
        assert busy[g] == sum(
            union_ns(ops.start[mine][ops.device[mine] == d], ops.end[mine][ops.device[mine] == d])
            for d in (0, 1)
        )
    # over all the kernels (one group): never more than their own times on their streams summed (within a group
    # it may be: a kernel's own time is cut by an earlier kernel of its stream in another group)
    everything = busy_by_group(np.zeros(len(k), dtype=np.int64), ops.device[k], ops.start[k], ops.end[k], 1)
    assert everything[0] <= own[k].sum()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from([-5, 0, 1, 7, 0xDEADBEEF, 2**62]),  # a hostile Kineto trace's pids as devices
            st.integers(0, 2),  # group
            st.integers(0, 10_000),  # start
            st.integers(0, 3_000),  # duration
        ),
        max_size=40,
    ),
    st.integers(0, 70),
)
def test_busy_time_on_device_ids_far_apart_or_many(rows, extra_devices):
    # ids that a count over their range would take gigabytes for (0xDEADBEEF), and more distinct GPUs than the
    # counted path takes (extra_devices more, one kernel each): each device's union per group, summed
    from roseprof.analysis.gpu_time import busy_by_group, distinct_devices

    rows = rows + [(100 + i, i % 3, 50 * i, 40) for i in range(extra_devices)]
    device, group, start, duration = (np.array([r[j] for r in rows], dtype=np.int64) for j in range(4))
    end = start + duration
    busy = busy_by_group(group, device, start, end, 3)
    assert distinct_devices(device).tolist() == sorted(set(device.tolist()))
    for g in range(3):
        mine = group == g
        want = sum(
            union_ns(start[mine & (device == d)], end[mine & (device == d)]) for d in set(device.tolist())
        )
        assert busy[g] == want


def test_the_concurrency_note_names_several_gpus_and_stays_quiet_within_one_percent():
    from roseprof.render.text import concurrency_note

    def steady(own, busy, gpus):
        return {"unit": "decode step", "gpus": gpus, "step": {"gpu_mean_ns": own, "gpu_busy_mean_ns": busy}}

    assert concurrency_note(steady(1_010_000, 1_000_000, 1)) is None  # within 1%: nothing to say
    one = concurrency_note(steady(780_100, 544_100, 1))
    assert "780.1 µs a decode step in the whole-step row), while the GPU was busy 544.1 µs" in one
    two = concurrency_note(steady(1_600_000, 1_100_000, 2))
    assert "while the 2 GPUs were busy 1.10 ms (summed)" in two
