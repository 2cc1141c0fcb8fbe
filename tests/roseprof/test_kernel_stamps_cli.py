"""Regions inside a fused kernel (issue 50), through the CLI as a user runs it: `roseprof import --stamps` and a
capture that asks its program for the stamps, the regions in show, the dashboard, diff and the Perfetto export, and
a stamps file that is none refused in one line. On CPU, from the real files test_kernel_stamps.py reads (its
helpers, imported from there)."""

import gzip
import json
import sys

import pytest

from roseinfer.cuda_ext import fused_mlp as fm
from roseinfer.names import KERNEL_REGION_NAMES, MLP_DOWN, MLP_NORM, MLP_UP
from tests.helpers import DATA, assert_one_line_error, roseprof
from tests.roseprof.test_kernel_stamps import (
    STAMPS,
    TRACE,
    gemm_name,
    matmul_trace,
    python_path,
    store,
    summary,
    write_stamps,
)


def imported(tmp_path, name, stamps=None):
    args = ["import", TRACE, "--name", name, *store(tmp_path)] + (["--stamps", stamps] if stamps else [])
    proc = roseprof(*args, env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def stamped(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("stamped")
    kernel = gemm_name(matmul_trace(tmp))
    stamps = write_stamps(tmp / "kernel_stamps.jsonl", kernel, 5)
    shown = imported(tmp, "mlp", stamps)
    imported(tmp, "mlp-again", stamps)
    return tmp, shown


def test_show_gives_time_per_region_inside_the_kernel(stamped):
    tmp, shown = stamped
    for region in (MLP_NORM, MLP_UP, MLP_DOWN):
        assert region in shown.stdout
    regions = {r["name"]: r for r in summary(tmp, "mlp")["regions"]}
    bounds = fm.phase_bounds(STAMPS["stamps"])
    for k, region in enumerate(KERNEL_REGION_NAMES):
        r = regions[region]
        assert r["count"] == 5 and r["total_ns"] == 5 * (bounds[k + 1] - bounds[k])
        # GPU ranges: their time is GPU time, and nothing of it is another region's
        assert r["gpu_ns"] == r["gpu_kernel_ns"] == r["gpu_proj_ns"] == r["self_ns"] == r["total_ns"]
    assert sum(regions[n]["total_ns"] for n in KERNEL_REGION_NAMES) == 5 * STAMPS["span_ns"]
    # the kernel and its launching region are as they were
    assert (
        regions["roseinfer.model.forward"]["gpu_kernel_ns"] == summary(tmp, "mlp")["kernels"][0]["total_ns"]
    )


def test_the_dashboard_and_diff_have_the_regions(stamped):
    tmp, _ = stamped
    pages = [p.read_text() for p in (tmp / "dash").glob("*.html")]  # the import's dashboards, one a run
    assert len(pages) == 2 and all(region in html for html in pages for region in KERNEL_REGION_NAMES)
    proc = roseprof("diff", "mlp", "mlp-again", "--json", *store(tmp))
    assert proc.returncode == 0, proc.stderr
    metrics = {m["name"]: m for m in json.loads(proc.stdout)["metrics"]}
    for region in KERNEL_REGION_NAMES:
        m = metrics[f"regions.{region}.total_ns"]
        assert m["a"] == m["b"] > 0 and not m["significant"]


def test_the_perfetto_export_draws_them_inside_their_launches(stamped, tmp_path):
    tmp, _ = stamped
    out = tmp_path / "mlp.json.gz"
    proc = roseprof("export", "mlp", "-o", out, *store(tmp))
    assert proc.returncode == 0, proc.stderr
    events = json.loads(gzip.open(out).read())["traceEvents"]
    kernels = [e for e in events if e.get("cat") == "kernel"]
    phases = [e for e in events if e.get("ph") == "X" and e["name"] in KERNEL_REGION_NAMES]
    assert len(phases) == 5 * len(KERNEL_REGION_NAMES)
    tracks = {(e["pid"], e["tid"]) for e in phases}
    (track,) = tracks
    assert track[0] == kernels[0]["pid"]  # the GPU's process, beside the kernel's stream
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert names[track] == f"GPU {kernels[0]['pid']} stream {kernels[0]['tid']} regions"
    for k in kernels:
        t0, t1 = float(k["ts"]), float(k["ts"]) + float(k["dur"])
        inside = [e for e in phases if t0 <= float(e["ts"]) < t1]
        assert [e["name"] for e in inside] == list(KERNEL_REGION_NAMES)
        assert float(inside[-1]["ts"]) + float(inside[-1]["dur"]) <= t1 + 1e-3


def test_a_stamps_file_that_is_none_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "stamps.jsonl"
    bad.write_text("hello\n")
    proc = roseprof("import", TRACE, "--stamps", bad, *store(tmp_path))
    assert_one_line_error(proc, 2, f"{bad}: not a kernel stamps file")
    assert not (tmp_path / "traces").exists() or not [
        p for p in (tmp_path / "traces").iterdir() if not p.name.startswith(".")
    ]
    proc = roseprof("import", TRACE, "--stamps", tmp_path / "missing.jsonl", *store(tmp_path))
    assert_one_line_error(proc, 2, "missing.jsonl: no such stamps file")


CAPTURED = """
import os, shutil, sys
from roseinfer.cuda_ext import fused_mlp as fm
from roseinfer.cuda_ext.stamps import StampLog, stamps_path
# what a program that runs a stamped kernel leaves: its Kineto trace (here a real one, copied) and its launches' stamps
shutil.copy(sys.argv[1], os.path.join(os.environ["ROSEPROF_TORCH_TRACE_DIR"], "trace.json"))
stamps = fm.phase_bounds(__import__("json").load(open(sys.argv[2]))["stamps"])
with StampLog(stamps_path()) as log:
    for _ in range(5):
        log.record(sys.argv[3], [r for _, r in fm.PHASES], stamps)
"""


def test_a_capture_asks_the_program_for_its_stamps_and_reads_them(tmp_path):
    """`roseprof torch -- PROGRAM`: the program finds where to write its stamps in $ROSEINFER_KERNEL_STAMPS."""
    program = tmp_path / "program.py"
    program.write_text(CAPTURED)
    kernel = gemm_name(matmul_trace(tmp_path))
    proc = roseprof(
        "torch", "--name", "cap", *store(tmp_path), "--", sys.executable, program, TRACE,
        DATA / "fused_mlp.stamps.json", kernel, env={"COLUMNS": "80", "PYTHONPATH": python_path()},
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run,) = [p for p in (tmp_path / "traces").iterdir() if not p.name.startswith(".")]
    assert (run / "kernel_stamps.jsonl").is_file()
    regions = {r["name"]: r for r in summary(tmp_path, "cap")["regions"]}
    assert sum(regions[n]["total_ns"] for n in KERNEL_REGION_NAMES) == 5 * STAMPS["span_ns"]
    assert MLP_UP in proc.stdout
