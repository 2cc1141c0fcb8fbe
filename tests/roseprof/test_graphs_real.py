"""CUDA-graph attribution on a real capture: the engine's fast path (`--paged-attn --cuda-graph`) under nsys
2025.3 with `--cuda-graph-trace=node` on an H100 (`bash scripts/gpu_check.sh fixture-graphs` writes the fixture: 8 requests,
batch 8, 72 new tokens; see tests/data/README.md).

Every kernel launched in a decode step is a graph replay's, and each must land in the model part whose region
was open when its graph node was captured; a step's graph time by part must add up to its kernel time; and the
fields `nsys stats` also reports must agree with it (to 0.1%), as for the eager fixture.
"""

import csv
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from roseprof.analysis.graphs import capture_ranges
from roseprof.analysis.ranges import build_tree
from roseprof.analysis.summary import analyse
from roseprof.drivers.nsys.reader import read_nsys_sqlite
from roseprof.model import KERNEL
from roseprof.workload import roseinfer as ri
from roseprof.workload.steplog import read_steplog
from tests.helpers import roseprof

DATA = Path(__file__).parent.parent / "data" / "nsys"
BASE = "h100-nsys2025.3-roseinfer-graphs"
SQLITE = DATA / f"{BASE}.sqlite"
STEPLOG = DATA / f"{BASE}.steplog.jsonl"
ORACLES = {r: DATA / f"{BASE}.stats_{r}.csv" for r in ("nvtx_sum", "cuda_gpu_kern_sum", "nvtx_gpu_proj_sum", "nvtx_kern_sum")}  # fmt: skip
NEEDED = [SQLITE, STEPLOG, *ORACLES.values()]
MISSING = [p for p in NEEDED if not p.exists()]
pytestmark = pytest.mark.skipif(
    bool(MISSING),
    reason=f"real CUDA-graph fixture missing: {', '.join(str(p.relative_to(DATA.parent.parent.parent)) for p in MISSING)}"
    " (written by `bash scripts/gpu_check.sh fixture-graphs` on a GPU machine)",
)
# The model's parts: the innermost region open when each node of the decode graph was made.
PARTS = {ri.EMBEDDING, ri.ATTENTION, ri.KV_APPEND, ri.LAYERNORM, ri.MLP, ri.LM_HEAD, ri.ARGMAX}
LEAVES = {
    ri.EMBEDDING,
    ri.ATTENTION,
    ri.LAYERNORM,
    ri.MLP,
    ri.LM_HEAD,
    ri.ARGMAX,
}  # KV_APPEND is in ATTENTION


def close(a, b, rel=1e-3):
    return abs(a - b) <= rel * max(abs(b), 1)


def rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def bare(range_name):
    return range_name.split(":", 1)[1] if range_name.startswith(":") else range_name


@pytest.fixture(scope="module")
def trace():
    return read_nsys_sqlite(str(SQLITE))


@pytest.fixture(scope="module")
def analysed(trace):
    return analyse(trace, read_steplog(str(STEPLOG)))


@pytest.fixture(scope="module")
def in_steps(trace):
    """(kernel rows launched inside a decode step [K], the step of each [K], their capture-time range [K])."""
    r = trace.ranges
    tree = build_tree(r.start, r.end, r.tid)
    capture = capture_ranges(trace, tree)
    names = np.array(trace.names.values, dtype=object)
    steps = np.flatnonzero(names[r.name] == ri.DECODE_STEP)
    steps = steps[np.argsort(r.start[steps])]
    ops = trace.ops
    k = np.flatnonzero((ops.kind == KERNEL) & (ops.api_start >= 0))
    step = np.searchsorted(r.start[steps], ops.api_start[k], side="right") - 1
    inside = (step >= 0) & (ops.api_start[k] <= r.end[steps][np.maximum(step, 0)])
    return k[inside], step[inside], capture[k[inside]], names


def test_every_kernel_of_a_decode_step_is_a_graph_replay_in_a_model_part(trace, in_steps):
    k, _, capture, names = in_steps
    assert len(k) > 1000
    assert (trace.ops.graph_node[k] >= 0).all()  # graph replays only: no eager kernel in a step
    assert (capture >= 0).all()  # every one placed at its capture-time region
    parts = set(names[trace.ranges.name[capture]])
    assert parts <= PARTS and LEAVES <= parts


def test_attribution_is_complete_for_graph_replays(analysed):
    summary, _ = analysed
    att = summary["kernel_attribution"]
    assert att["graph_replayed_ns"] > 0
    assert att["graph_by_capture_ns"] == att["graph_replayed_ns"]
    assert not any("counted as whole graphs" in w for w in summary["warnings"])
    regions = {r["name"]: r for r in summary["regions"]}
    # forward held every part at capture time: its graph time is all of it, and the parts add up to it.
    assert regions[ri.MODEL_FORWARD]["gpu_graph_ns"] == att["graph_by_capture_ns"]
    assert sum(regions[name]["gpu_graph_ns"] for name in LEAVES) == att["graph_by_capture_ns"]
    assert regions[ri.KV_APPEND]["gpu_graph_ns"] <= regions[ri.ATTENTION]["gpu_graph_ns"]


def test_graph_time_per_step_adds_up_to_kernel_time_per_step(trace, analysed, in_steps):
    summary, tables = analysed
    k, step, _, _ = in_steps
    steps = tables["steps"]
    cols = [c for c in steps if c.startswith("graph:")]
    assert {c[len("graph:") :] for c in cols} <= PARTS
    by_part = np.sum([np.asarray(steps[c], dtype=np.int64) for c in cols], axis=0)  # [S]
    kernel = np.bincount(step, weights=trace.ops.end[k] - trace.ops.start[k], minlength=len(by_part))
    assert by_part.tolist() == kernel.astype(np.int64).tolist()
    assert by_part.sum() == summary["kernel_attribution"]["graph_replayed_ns"]  # no replay outside a step
    # Mean per normal step: the summary's graph_regions add up to the mean kernel time of those steps.
    normal = np.asarray(steps["rollovers"]) == 0
    assert close(sum(summary["steps"]["normal"]["graph_regions"].values()), by_part[normal].mean())


def test_regions_agree_with_nvtx_sum(analysed):
    ours = {r["name"]: r for r in analysed[0]["regions"]}
    expected = rows(ORACLES["nvtx_sum"])
    assert len(ours) == len(expected)
    for row in expected:
        r = ours[bare(row["Range"])]
        assert r["count"] == int(row["Instances"])
        assert close(r["total_ns"], int(row["Total Time (ns)"]))
        assert close(r["p50_ns"], float(row["Med (ns)"]))


def test_kernels_agree_with_cuda_gpu_kern_sum(analysed):
    per_name = defaultdict(lambda: [0, 0])
    for k in analysed[0]["kernels"]:
        per_name[k["name"]][0] += k["count"]
        per_name[k["name"]][1] += k["total_ns"]
    expected = defaultdict(lambda: [0, 0])
    for row in rows(ORACLES["cuda_gpu_kern_sum"]):
        expected[row["Name"]][0] += int(row["Instances"])
        expected[row["Name"]][1] += int(row["Total Time (ns)"])
    assert len(expected) == len(per_name)
    for name, (count, total) in expected.items():
        assert per_name[name][0] == count and close(per_name[name][1], total)


def test_launch_rule_fields_agree_with_nvtx_gpu_proj_sum_and_nvtx_kern_sum(analysed):
    # gpu_proj_ns and gpu_kernel_ns follow the launch rule as nsys stats does (a replay's kernels belong to the
    # ranges around cudaGraphLaunch); gpu_graph_ns is ours alone.
    ours = {r["name"]: r for r in analysed[0]["regions"]}
    for row in rows(ORACLES["nvtx_gpu_proj_sum"]):
        r = ours[bare(row["Range"])]
        # nvtx_gpu_proj_sum counts only the instances that launched GPU work (79 of the 83 forward ranges here)
        assert r["count"] >= int(row["Range Instances"])
        assert close(r["gpu_proj_ns"], int(row["Total Proj Time (ns)"]))
    kern = defaultdict(int)
    for row in rows(ORACLES["nvtx_kern_sum"]):
        if row["NVTX Range"]:
            kern[bare(row["NVTX Range"])] += int(row["Total Time (ns)"])
    assert kern
    for name, total in kern.items():
        assert close(ours[name]["gpu_kernel_ns"], total)


def test_import_as_a_user_would(tmp_path):
    traces, dashboards = tmp_path / "traces", tmp_path / "dashboards"
    store = ["--traces-dir", traces, "--dashboards-dir", dashboards]
    proc = roseprof("import", SQLITE, "--name", "graphs", "--steplog", STEPLOG, *store)
    assert proc.returncode == 0, proc.stderr
    shown = roseprof("show", "graphs", "--json", *store)
    assert shown.returncode == 0, shown.stderr
    summary = json.loads(shown.stdout)
    assert summary["kernel_attribution"]["graph_by_capture_ns"] > 0
    assert set(summary["steps"]["normal"]["graph_regions"]) <= PARTS
