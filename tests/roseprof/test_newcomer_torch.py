"""Issue 45, item 6: a program that is not the engine gets no engine words (the progress line, diff's rows), and a
torch run gets the operator table users know from key_averages(), checked against torch.profiler itself and
against real traces other projects published."""

import gzip
import json
import sys
from collections import defaultdict

import pytest

from roseprof.analysis.summary import analyse
from roseprof.drivers.torch.reader import read_kineto
from tests.helpers import DATA, roseprof
from tests.roseprof.test_views_width import run_in_terminal

KINETO = sorted(p for p in (DATA / "torch").glob("*.json*") if p.name.endswith((".json", ".json.gz")))
PROGRAM = """
import os, torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler
out = tensorboard_trace_handler(os.environ["ROSEPROF_TORCH_TRACE_DIR"])
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=1, active=6),
             on_trace_ready=out, record_shapes=True) as prof:
    for step in range(7):
        with record_function("matmul"):
            torch.randn(64, 64) @ torch.randn(64, 64)
        prof.step()
"""


def raw_cpu_ops(path):
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        events = json.load(fh)["traceEvents"]
    calls, us = defaultdict(int), defaultdict(float)
    for e in events:
        # A CPU op; in 2021 traces an `Operator` that is not a scope (the reader's rule: a scope's name has no
        # `::` and has a `#` or a `.`).
        scope = "::" not in e.get("name", "") and ("#" in e.get("name", "") or "." in e.get("name", ""))
        if e.get("ph") == "X" and (e.get("cat") == "cpu_op" or (e.get("cat") == "Operator" and not scope)):
            calls[e["name"]] += 1
            us[e["name"]] += e["dur"]
    return calls, us


def test_operator_table_agrees_with_key_averages(tmp_path):
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        for _ in range(10):
            with record_function("step"):
                x = torch.randn(32, 32)
                (x @ x).relu().sum()
                torch.cat([x, x]).mean()
    path = tmp_path / "cpu.pt.trace.json"
    prof.export_chrome_trace(str(path))
    summary, _ = analyse(read_kineto(path), None)
    ops = {r["name"]: r for r in summary["operators"]["top"]}
    ka = {e.key: e for e in prof.key_averages() if e.key.startswith("aten::")}
    assert {"aten::mm", "aten::relu", "aten::sum", "aten::cat", "aten::mean"} <= set(ops)
    for name in ("aten::mm", "aten::relu", "aten::cat", "aten::randn"):
        row, want = ops[name], ka[name]
        assert row["calls"] == want.count, name
        for key, us in (("cpu_ns", want.cpu_time_total), ("self_cpu_ns", want.self_cpu_time_total)):
            assert abs(row[key] - us * 1000) <= max(1e-3 * us * 1000, 1000 * want.count), (name, key)
        assert row["self_device_ns"] is None  # a CPU run: no device columns
    shaped = {(r["name"], r["shapes"]) for r in summary["operators"]["by_shape"]}
    assert ("aten::mm", "[[32, 32], [32, 32]]") in shaped


@pytest.mark.parametrize("path", KINETO, ids=lambda p: p.name[:40])
def test_operator_table_on_real_traces(path):
    calls, us = raw_cpu_ops(path)
    summary, _ = analyse(read_kineto(path), None)
    part = summary["operators"]
    if not calls:
        assert part is None
        return
    assert part["groups"] == len(calls)
    for row in part["top"]:  # each operator's calls and CPU time are the file's own, summed
        assert row["calls"] == calls[row["name"]]
        assert abs(row["cpu_ns"] - us[row["name"]] * 1000) <= max(1e-3 * us[row["name"]] * 1000, row["calls"])
        assert 0 <= row["self_cpu_ns"] <= row["cpu_ns"]
        if row["device_ns"] is not None:
            assert 0 <= row["self_device_ns"] <= row["device_ns"]


def test_the_matmul_kernels_belong_to_aten_mm():
    """On the H100 trace every kernel is cuBLAS' for aten::mm, launched inside aten::matmul."""
    summary, _ = analyse(read_kineto(DATA / "torch" / "h100-torch2.11-matmul-trace.json"), None)
    ops = {r["name"]: r for r in summary["operators"]["top"]}
    kernels = summary["gpu_ops"]["kernel_ns"]
    assert ops["aten::mm"]["self_device_ns"] == ops["aten::mm"]["device_ns"] == kernels
    assert ops["aten::matmul"]["self_device_ns"] == 0 and ops["aten::matmul"]["device_ns"] == kernels


def test_a_program_that_is_not_the_engine_gets_no_engine_words(tmp_path):
    args = ["--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d"]
    command = ["--", sys.executable, "-c", PROGRAM]
    # In a terminal, as the user saw the progress line.
    out = run_in_terminal(["torch", "--name", "mm", *args, *command])
    assert "analysing: regions, kernels" in out and "decode steps" not in out, out
    proc = roseprof("torch", "--name", "mm", *args, *command, env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    # show lists the operators, at 80 columns.
    show = roseprof("show", "mm", *args, env={"COLUMNS": "80"})
    assert "operators (torch.profiler)" in show.stdout and "aten::mm" in show.stdout
    assert all(
        len(line.rstrip()) <= 80 for line in show.stdout.splitlines() if not line.startswith("run folder")
    )
    # diff compares its steps as steps: no rollover or normal rows.
    ids = sorted(p.name for p in (tmp_path / "t").iterdir() if not p.name.startswith("."))
    diff = roseprof("diff", *ids, *args, env={"COLUMNS": "80"})
    assert diff.returncode == 0, diff.stderr
    rows = [line.strip() for line in diff.stdout.splitlines()]
    assert any(row.startswith("step p50") for row in rows), diff.stdout
    assert not [row for row in rows if row.startswith(("normal step", "rollover step"))], diff.stdout
    metrics = json.loads(roseprof("diff", *ids, "--json", *args).stdout)["metrics"]
    assert not [m["name"] for m in metrics if ".normal." in m["name"] or ".rollover." in m["name"]]
