"""Regions inside a fused kernel (issue 50): a stamps file read into GPU ranges of the kernel's launches, and those
ranges in the steady state; show, the dashboard, diff and the Perfetto export of an imported or captured run are
test_kernel_stamps_cli.py's, which runs the CLI with the helpers here.

On CPU, from real files only: the kernel's own stamps of one launch on an H200 (tests/data/fused_mlp.stamps.json,
reduced to its phase bounds by the kernel's host code, `fused_mlp.record_stamps`' path) attached to the launches
of a real Kineto trace from an H100 (tests/data/torch/h100-torch2.11-matmul-trace.json: 5 GEMM launches of
~56 us, so the 8.64 us of stamps fit inside each). On a GPU (marked `gpu`; one call runs them all:
`PYTHONPATH=. python -m pytest tests/roseprof/test_kernel_stamps.py -m gpu`): the truth tests, on captures of
the kernel itself (`roseprof torch -- python scripts/stamped_mlp_program.py`)."""

import json
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from roseinfer.cuda_ext import fused_mlp as fm
from roseinfer.cuda_ext.stamps import StampLog
from roseinfer.names import KERNEL_REGION_NAMES, MLP_DOWN, MLP_NORM, MLP_SUM, MLP_UP
from roseprof.drivers.torch import read
from roseprof.model import KERNEL, gpu_track_parts, is_gpu_track
from roseprof.model_check import check
from roseprof.workload import kernel_stamps
from tests.helpers import DATA, packed, roseprof

TRACE = DATA / "torch" / "h100-torch2.11-matmul-trace.json"
STAMPS = json.loads((DATA / "fused_mlp.stamps.json").read_text())
ROOT = Path(__file__).parents[2]


def gemm_name(trace) -> str:
    (name,) = {trace.names[i] for i in trace.ops.name[trace.ops.kind == KERNEL]}
    return name


def write_stamps(path: Path, kernel: str, launches: int) -> Path:
    """The fixture's one launch, as its host code writes it, once per launch of `kernel`."""
    with StampLog(path) as log:
        for _ in range(launches):
            log.record(kernel, [region for _, region in fm.PHASES], fm.phase_bounds(STAMPS["stamps"]))
    return path


def matmul_trace(tmp_path):
    return read(TRACE, tmp_path, str(TRACE))


def test_each_launch_gets_its_phases_named_placed_from_its_start_and_adding_up(tmp_path):
    trace = matmul_trace(tmp_path)
    kernel = gemm_name(trace)
    launches, warnings = kernel_stamps.read_stamps(write_stamps(tmp_path / "s.jsonl", kernel, 5), "s.jsonl")
    ranges_before = len(trace.ranges)
    kernel_stamps.attach(trace, launches, "s.jsonl")
    assert warnings == [] and trace.warnings == [] and check(trace) == []
    r, o = trace.ranges, trace.ops
    on_gpu = np.flatnonzero(is_gpu_track(r.tid))
    assert len(r) - ranges_before == len(on_gpu) == 5 * len(fm.PHASES)
    ks = np.flatnonzero(o.kind == KERNEL)
    for op in ks.tolist():
        mine = on_gpu[(r.start[on_gpu] >= o.start[op]) & (r.end[on_gpu] <= o.end[op])]
        assert [trace.names[i] for i in r.name[mine]] == list(KERNEL_REGION_NAMES)
        assert r.start[mine[0]] == o.start[op]  # placed from the launch's start, not on the GPU's clock
        assert (r.start[mine[1:]] == r.end[mine[:-1]]).all()  # contiguous phases
        assert int((r.end[mine] - r.start[mine]).sum()) == STAMPS["span_ns"]  # the fixture's own span
        device, stream, _ = gpu_track_parts(r.tid[mine])
        assert set(device.tolist()) == {int(o.device[op])} and set(stream.tolist()) == {int(o.stream[op])}
        # the track's process is the one that launched the kernel
        assert trace.thread_pids[int(r.tid[mine[0]])] == trace.thread_pids[int(o.api_tid[op])]


def test_counts_that_disagree_attach_nothing_and_say_why(tmp_path):
    trace = matmul_trace(tmp_path)
    kernel = gemm_name(trace)
    for launches, name in ((4, kernel), (5, "xmma")):  # one launch missing; a part of a word names no kernel
        trace = matmul_trace(tmp_path)
        stamped, _ = kernel_stamps.read_stamps(
            write_stamps(tmp_path / f"{name}{launches}", name, launches), "f"
        )
        kernel_stamps.attach(trace, stamped, "f")
        assert not is_gpu_track(trace.ranges.tid).any()
        found = 5 if name == kernel else 0
        assert trace.warnings == [
            f"f: {launches} launch(es) of {name} stamped, the trace has {found}: their regions are left out "
            "(launches are matched in order, so the counts must agree)"
        ]


def test_each_ranks_lines_go_to_its_own_processs_launches(tmp_path):
    # Tensor-parallel ranks append to one stamps file, each line with its process: on a real two-rank nsys capture
    # (two H200s, 1,296 gemv_kernel launches by each rank's process), rank 1's lines written first and in turns with
    # rank 0's, each rank's launches get its own lines' phases, in its own order, on its own GPU's tracks. A
    # process whose count disagrees loses its ranges alone, and the warning names it.
    from roseprof.drivers.nsys.reader import read_nsys_sqlite

    path = packed(DATA / "nsys" / "h200x2-nsys2025.3-roseinfer-tp2.sqlite")
    pid0, pid1 = 1525, 1571  # the fixture's processes: rank 0 drives GPU 0, rank 1 GPU 1
    regions = ("a.one", "a.two")
    for extra in (0, 1):
        trace = read_nsys_sqlite(str(path))
        o = trace.ops
        gemv = np.flatnonzero((o.kind == KERNEL) & (o.name == trace.names.intern("gemv_kernel")))
        launches = {
            pid: int(sum(trace.thread_pids[int(t)] == pid for t in o.api_tid[gemv])) for pid in (pid0, pid1)
        }
        assert launches == {pid0: 1296, pid1: 1296}
        stamps = tmp_path / f"s{extra}.jsonl"
        with StampLog(stamps, pid=pid0) as rank0, StampLog(stamps, pid=pid1) as rank1:
            for k in range(1296 + extra):  # rank 1 first; each launch's span is 100 + k ns (rank 0) or 50 + k
                rank1.record("gemv_kernel", regions, [0, 50, 50 + k])
                if k < 1296:
                    rank0.record("gemv_kernel", regions, [0, 100, 100 + k])
        stamped, _ = kernel_stamps.read_stamps(stamps, "s")
        kernel_stamps.attach(trace, stamped, "s")
        assert check(trace) == []
        r = trace.ranges
        on_gpu = np.flatnonzero(is_gpu_track(r.tid))
        device, _, _ = gpu_track_parts(r.tid[on_gpu])
        if extra:  # rank 1 has a line too many: rank 0's are placed, rank 1's left out
            assert trace.warnings == [
                "s: 1,297 launch(es) of gemv_kernel by process 1571 stamped, the trace has 1,296: their regions "
                "are left out (launches are matched in order, so the counts must agree)"
            ]
            assert set(device.tolist()) == {0}
            continue
        assert trace.warnings == []
        for dev, first in ((0, 100), (1, 50)):
            mine = on_gpu[device == dev]
            ones = mine[[trace.names[i] == "a.one" for i in r.name[mine]]]
            twos = mine[[trace.names[i] == "a.two" for i in r.name[mine]]]
            assert len(ones) == len(twos) == 1296
            assert set((r.end[ones] - r.start[ones]).tolist()) == {first}  # this rank's own lines
            starts = np.sort(r.start[twos])  # in this rank's order: the k-th launch's span is first + k
            assert ((r.end[twos] - r.start[twos])[np.argsort(r.start[twos])] == np.arange(1296)).all()
            assert (starts == np.sort(o.start[gemv][o.device[gemv] == dev]) + first).all()


def test_the_steady_state_has_each_steps_time_inside_kernels_of_the_steps_own_rank(tmp_path):
    # The real two-rank capture imported with its step log and a stamps file of both ranks (each gemv_kernel launch
    # a.one then a.two: 100 and 300 ns on rank 0, 1,000 and 3,000 on rank 1). The steps are rank 0's, and so is
    # their time inside kernels: a steady step has rank 0's 48 launches (4 GEMVs x 12 layers) and none of rank 1's,
    # which launches on its own host timeline; `show` says whose GPU the figures are.
    from roseprof import api
    from roseprof.run.store import RunStore

    base = DATA / "nsys" / "h200x2-nsys2025.3-roseinfer-tp2"
    stamps = tmp_path / "kernel_stamps.jsonl"
    for pid, unit in ((1525, 100), (1571, 1000)):
        with StampLog(stamps, pid=pid) as log:
            log.record_many("gemv_kernel", ("a.one", "a.two"), [[0, unit, 4 * unit]] * 1296)
    store = RunStore(tmp_path / "traces")
    run = api.import_path(store, packed(f"{base}.sqlite"), None, f"{base}.steplog.jsonl", stamps=str(stamps))
    steady = json.loads((run.path / "summary.json").read_text())["steady"]
    assert steady["gpus"] == 1 and steady["pids"] == [1525]
    regions = {r["name"]: r for r in steady["regions"]}
    # rank 0's 48 launches a step (the p50), never one of rank 1's 1,000-ns ones more (the mean is no higher)
    for name, unit in (("a.one", 100), ("a.two", 300)):
        assert regions[name]["gpu_p50_ns"] == 48 * unit and regions[name]["gpu_mean_ns"] <= 48 * unit
    shown = roseprof("show", "--traces-dir", str(tmp_path / "traces"), run.id, env={"COLUMNS": "200"})
    assert "a.two" in shown.stdout
    assert "GPU: the steps' own process's GPU time (pid 1525, rank 0)" in shown.stdout
    # the dashboard's chart says it too, escaped once (plotly decodes its title's entities once)
    from roseprof.render.figures import steady_bars

    title = steady_bars(json.loads((run.path / "summary.json").read_text())).layout.title.text
    assert "the steps&#x27; own process&#x27;s GPU time" in title and "&amp;" not in title
    # what the steady state leaves out is rank 0's too: its one prefill, not both ranks'
    assert steady["excluded"]["prefill"]["ranges"] == 1


def test_a_span_longer_than_the_launch_is_cut_at_its_end(tmp_path):
    """The H100 fixture's Triton kernels are shorter than the H200 launch's 8.64 us of stamps."""
    trace = read(DATA / "torch" / "h100-torch2.11-roseinfer-graphs.json.gz", tmp_path, "t")
    o = trace.ops
    dur = o.end - o.start
    kernels = np.flatnonzero((o.kind == KERNEL) & (dur < STAMPS["span_ns"]))
    name = trace.names[int(o.name[kernels[0]])]
    same = np.flatnonzero((o.kind == KERNEL) & (o.name == o.name[kernels[0]]))
    stamped, _ = kernel_stamps.read_stamps(write_stamps(tmp_path / "s", name, len(same)), "s")
    kernel_stamps.attach(trace, stamped, "s")
    assert check(trace) == []
    r = trace.ranges
    on_gpu = is_gpu_track(r.tid)
    assert on_gpu.sum() == len(same) * len(fm.PHASES)
    short = int((dur[same] < STAMPS["span_ns"]).sum())
    assert trace.warnings[-1].startswith(f"s: {short:,} of {len(same):,} stamped launch(es) span longer")
    # every range inside the launch it belongs to: none past the last launch's end
    assert r.end[on_gpu].max() <= o.end[same].max() and r.start[on_gpu].min() >= o.start[same].min()


def test_overlapping_launches_go_on_lanes_of_their_own():
    start, end = np.array([0, 5, 12, 14]), np.array([10, 13, 20, 30])
    lanes = kernel_stamps._lanes(np.zeros(4, int), np.full(4, 7), start, end)
    assert lanes.tolist() == [0, 1, 0, 1]


def test_damaged_lines_cost_themselves_and_a_file_of_none_is_refused(tmp_path):
    path = write_stamps(tmp_path / "s.jsonl", "fused_mlp_kernel", 2)
    good = path.read_text().splitlines()
    bounds = json.loads(good[0])["bounds_ns"]
    backwards = json.dumps({**json.loads(good[0]), "bounds_ns": bounds[::-1]})
    path.write_text("\n".join([good[0], "{not json", backwards, good[1][:40], good[1]]) + "\n")
    launches, warnings = kernel_stamps.read_stamps(path, "s.jsonl")
    assert len(launches) == 2 and warnings == ["s.jsonl: 3 damaged line(s) left out"]
    (tmp_path / "none.jsonl").write_text("{}\nhello\n")
    with pytest.raises(Exception, match=r"none.jsonl: not a kernel stamps file \(none of its 2 line\(s\)"):
        kernel_stamps.read_stamps(tmp_path / "none.jsonl", "none.jsonl")


# -- the CLI, as a user runs it -----------------------------------------------------------------------------------


def store(tmp_path):
    return ["--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path / "dash"]


def summary(tmp_path, name):
    proc = roseprof("show", name, "--json", *store(tmp_path))
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def python_path() -> str:
    """This repo first, then what the caller had (the GPU machine's wheels travel on PYTHONPATH)."""
    return os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)


# -- on a GPU: the truth tests ------------------------------------------------------------------------------------


def gpu_capture(tmp_path, name, *flags, tool=("torch",)):
    """`roseprof torch` (or `tool`) of the stamped kernel (test build), 40 launches; its summary."""
    proc = roseprof(
        *tool, "--name", name, *store(tmp_path), "--", sys.executable,
        ROOT / "scripts" / "stamped_mlp_program.py", "--launches", "40", *flags,
        env={"PYTHONPATH": python_path()}, timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return summary(tmp_path, name)


def kernel_of(s):
    (k,) = [k for k in s["kernels"] if fm.KERNEL in k["name"]]
    return k


@pytest.mark.gpu
@pytest.mark.parametrize("delay_us", [50, 100])
def test_gpu_the_regions_add_up_to_the_kernels_duration(tmp_path, delay_us):
    """Every launch's regions against the kernel's own duration (CUPTI, through torch.profiler) in the run:
    within 2%. What no stamp sees (the blocks' dispatch, the grid's retirement: ~0.8 us a launch on an H200,
    docs/BENCHMARKS.md) is 11% of the plain ~7 us kernel, so a planted spin in c_fc lengthens it past 50 us."""
    s = gpu_capture(tmp_path, f"mlp-{delay_us}", "--delay-phase", "2", "--delay-us", str(delay_us))
    regions = {r["name"]: r for r in s["regions"]}
    kernel = kernel_of(s)
    assert kernel["count"] == 40 and all(regions[n]["count"] == 40 for n in KERNEL_REGION_NAMES)
    covered = sum(regions[n]["total_ns"] for n in KERNEL_REGION_NAMES)
    print(f"regions {covered} ns of the kernel's {kernel['total_ns']} ns: {covered / kernel['total_ns']:.4f}")
    assert abs(covered / kernel["total_ns"] - 1) <= 0.02


@pytest.mark.gpu
@pytest.mark.nsys
def test_gpu_nsys_reads_the_same_stamps_into_the_same_regions(tmp_path):
    """Under `roseprof nsys` (every launch recorded: the warm-up's 5 are stamped too) the regions add up to the
    kernel's duration as nsys measured it, within 2% (a 50 us spin in c_fc, as above)."""
    s = gpu_capture(
        tmp_path, "mlp-nsys", "--delay-phase", "2", "--delay-us", "50", tool=("nsys", "--trace", "cuda")
    )
    regions = {r["name"]: r for r in s["regions"]}
    kernel = kernel_of(s)
    assert kernel["count"] == 45 and all(regions[n]["count"] == 45 for n in KERNEL_REGION_NAMES)
    covered = sum(regions[n]["total_ns"] for n in KERNEL_REGION_NAMES)
    print(
        f"nsys: regions {covered} ns of the kernel's {kernel['total_ns']} ns: {covered / kernel['total_ns']:.4f}"
    )
    assert abs(covered / kernel["total_ns"] - 1) <= 0.02


@pytest.fixture(scope="module")
def gpu_base(tmp_path_factory):
    """One capture without a delay, which each planted delay is compared with (in the same store)."""
    tmp = tmp_path_factory.mktemp("gpu")
    return tmp, gpu_capture(tmp, "base")


@pytest.mark.gpu
@pytest.mark.parametrize("phase,region", [(1, MLP_NORM), (2, MLP_UP), (3, MLP_DOWN), (4, MLP_SUM)])
def test_gpu_a_planted_delay_moves_its_region_only(gpu_base, phase, region):
    """A 20 us spin in one phase (test build): that region's median per launch moves by 20 us within 10%, every
    other region's by less than 10% of it; roseprof diff sees the region's total grow by the delay a launch."""
    delay_ns = 20_000
    tmp, base = gpu_base
    slow = gpu_capture(tmp, f"slow-{phase}", "--delay-phase", str(phase), "--delay-us", str(delay_ns / 1000))
    p50 = {
        name: {r["name"]: r["p50_ns"] for r in s["regions"]} for name, s in (("base", base), ("slow", slow))
    }
    moved = {n: p50["slow"][n] - p50["base"][n] for n in KERNEL_REGION_NAMES}
    print(f"delay in phase {phase}: regions moved by (ns) {moved}")
    assert abs(moved[region] - delay_ns) <= 0.1 * delay_ns, moved
    assert all(abs(m) <= 0.1 * delay_ns for n, m in moved.items() if n != region), moved
    proc = roseprof("diff", "base", f"slow-{phase}", "--json", *store(tmp))
    assert proc.returncode == 0, proc.stderr
    m = {m["name"]: m for m in json.loads(proc.stdout)["metrics"]}[f"regions.{region}.total_ns"]
    assert abs((m["b"] - m["a"]) - 40 * delay_ns) <= 0.1 * 40 * delay_ns, m
