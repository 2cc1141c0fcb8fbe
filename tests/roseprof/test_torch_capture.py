"""`roseprof torch` and `roseprof export` as a user runs them, on real captures made here (CPU)."""

import gzip
import json
import sys
from pathlib import Path

import pytest

from roseprof.workload import roseinfer as workload
from tests.helpers import DATA, assert_one_line_error, engine_command, roseprof

ENGINE = engine_command(
    "roseinfer.benchmark_streaming",
    3,
    "--hf-model-id",
    "gpt2-tiny",
    "--device",
    "cpu",
    "--max-batch-size",
    "3",
)  # 70 new tokens cross a 64-token block: rollover steps
PROGRAM = """
import os, torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler
out = tensorboard_trace_handler(os.environ["ROSEPROF_TORCH_TRACE_DIR"])  # writes <worker>.<ts>.pt.trace.json
with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=1, warmup=1, active=4), on_trace_ready=out) as prof:
    for step in range(6):
        with record_function("train.step"):
            with record_function("train.forward"):
                torch.randn(32, 32) @ torch.randn(32, 32)
        prof.step()
"""


def only_run(traces: Path) -> Path:
    (run,) = [p for p in traces.iterdir() if not p.name.startswith(".")]
    return run


def store(tmp_path, name="traces"):
    return ["--traces-dir", tmp_path / name, "--dashboards-dir", tmp_path / "dash"]


@pytest.fixture(scope="module")
def engine_window(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("torch")
    args = (
        "torch",
        "--name",
        "eng",
        "--wait",
        "3",
        "--warmup",
        "1",
        "--active",
        "12",
        *store(tmp),
        "--",
        *ENGINE,
    )
    proc = roseprof(*args)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return only_run(tmp / "traces")


def test_engine_window_joins_the_step_log_by_time(engine_window):
    run = engine_window
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["tool"]["name"] == "torch"
    assert manifest["tool"]["version"] != "?"  # the engine tags the trace with torch's version
    assert list((run / "raw" / "torch").glob("trace.json.gz")) and (run / "steplog.jsonl").is_file()
    rows = json.loads((run / "steps.json").read_text())["rows"]
    log = [json.loads(x) for x in (run / "steplog.jsonl").read_text().splitlines()]
    log_steps = [r for r in log if r["type"] == "step"]
    assert len(log_steps) > 12
    # The window's first decode step is step wait + warmup of the engine, not step 0.
    assert rows["index"] == list(range(4, 16))
    for i, k in enumerate(rows["index"]):
        assert rows["batch_size"][i] == log_steps[k]["batch_size"]
        assert rows["rollovers"][i] == log_steps[k]["rollovers"]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"]["count"] == 12 and summary["itl"] is not None
    names = {r["name"] for r in summary["regions"]}
    assert {workload.DECODE_STEP, workload.MODEL_FORWARD, workload.KV_APPEND} <= names
    assert not any(n.startswith("ProfilerStep") for n in names)


def test_a_program_that_is_not_the_engine(tmp_path):
    prog = tmp_path / "mine.py"
    prog.write_text(PROGRAM)
    proc = roseprof("torch", *store(tmp_path), "--", sys.executable, prog)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # No --name: the run's name says the tool (issue 21: a name is a group in diff, and must not pool an nsys
    # run of the same command).
    manifest = json.loads((only_run(tmp_path / "traces") / "manifest.json").read_text())
    assert manifest["name"] == f"torch-{Path(sys.executable).name}"
    summary = json.loads((only_run(tmp_path / "traces") / "summary.json").read_text())
    regions = {r["name"]: r["count"] for r in summary["regions"]}
    assert regions["train.step"] == 4 and regions["train.forward"] == 4
    assert summary["steps"]["count"] == 4  # ProfilerStep#N spans, with no step log


def test_kinetos_own_lines_stay_in_the_log_not_on_stderr(tmp_path):
    """torch.profiler's library (Kineto) prints its progress on the program's stderr (`USDT:... profiler_start`,
    `STAGE:... Completed Stage: ...`, whatever KINETO_LOG_LEVEL says): the tool's own lines, kept in raw/torch.log
    as nsys' are in raw/nsys.log; piped, a capture's stderr stays quiet. The program's own lines still show."""
    prog = tmp_path / "mine.py"
    prog.write_text("import sys\nprint('mine: on stderr', file=sys.stderr)\n" + PROGRAM)
    proc = roseprof("torch", *store(tmp_path), "--", sys.executable, prog, env={"KINETO_LOG_LEVEL": "2"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stderr.splitlines()
    assert "mine: on stderr" in lines, proc.stderr
    # none of Kineto's progress lines (torch's own warnings, which it shows on purpose, may be there)
    kineto = [
        x for x in lines if x.startswith(("USDT:", "STAGE:")) or "Completed Stage" in x or "profiler_st" in x
    ]
    assert not kineto, proc.stderr
    log = (only_run(tmp_path / "traces") / "raw" / "torch.log").read_text()
    assert "mine: on stderr" in log and "Completed Stage" in log


def test_no_trace_written_is_nothing_to_analyse(tmp_path):
    """A program that ran fine and wrote no trace: nothing recorded (exit 2, nothing stored), as nsys' "recorded
    no range", not a profiler failure."""
    proc = roseprof("torch", *store(tmp_path), "--", sys.executable, "-c", "pass", env={"COLUMNS": "80"})
    assert_one_line_error(proc, 2, "no torch.profiler trace was written")
    assert "nothing stored" in proc.stderr and "ROSEPROF_TORCH_TRACE_DIR" in proc.stderr
    assert not (tmp_path / "traces").exists() or not any((tmp_path / "traces").iterdir())


def _totals(summary):
    regions = {(r["name"], r["count"], r["total_ns"]) for r in summary["regions"]}
    kernels = {}
    for k in summary["kernels"]:
        c, t = kernels.get(k["name"], (0, 0))
        kernels[k["name"]] = (c + k["count"], t + k["total_ns"])
    return regions, kernels


def _check_perfetto_shape(path: Path) -> list[dict]:
    """What Perfetto's JSON importer needs: traceEvents, known phases, us timestamps, integer pid/tid."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as fh:
        doc = json.load(fh)
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    for e in events:
        assert e["ph"] in ("X", "M", "i", "C", "s", "f"), e
        assert isinstance(e["pid"], int) and isinstance(e["tid"], int), e
        if e["ph"] != "M":
            assert isinstance(e["ts"], (int, float)), e
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
        if e["ph"] == "i":
            assert e["s"] in ("t", "p", "g")
        if e["ph"] in ("s", "f"):
            assert "id" in e
    return events


@pytest.mark.parametrize("source", ["nsys", "torch"])
def test_export_reimports_with_the_same_totals(source, tmp_path, engine_window):
    if source == "nsys":
        sqlite = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.sqlite"
        assert roseprof("import", sqlite, "--name", "src", *store(tmp_path)).returncode == 0
        traces, ref = tmp_path / "traces", "src"
    else:
        traces, ref = engine_window.parent, engine_window.name
    out = tmp_path / "out.json.gz"
    proc = roseprof("export", ref, "--format", "chrome", "-o", out, "--traces-dir", traces)
    assert proc.returncode == 0, proc.stderr
    events = _check_perfetto_shape(out)
    run = [p for p in traces.iterdir() if p.name.startswith(ref) or ref in p.name][0]
    original = json.loads((run / "summary.json").read_text())
    assert any(e.get("cat") == "roseprof.step" for e in events) == bool(original["steps"])
    assert roseprof("import", out, *store(tmp_path, "back")).returncode == 0
    back = json.loads((only_run(tmp_path / "back") / "summary.json").read_text())
    assert _totals(back) == _totals(original)


def test_export_of_a_missing_run_is_one_line(tmp_path):
    proc = roseprof("export", "nope", "--traces-dir", tmp_path)
    assert proc.returncode == 2 and "no run 'nope'" in proc.stderr


@pytest.mark.nsys
def test_nsys_and_torch_agree_on_steps_and_regions(tmp_path):
    from roseprof.drivers.nsys.capture import find_nsys

    if find_nsys() is None:
        pytest.skip("nsys not installed")
    cmd = ENGINE[:-7] + [
        "--max-new-tokens",
        "20",
        "--warmup-runs",
        "0",
        "--repeat-runs",
        "1",
        "--no-stop-on-eos",
    ]
    nsys = roseprof("nsys", *store(tmp_path, "n"), "--", *cmd)
    torch = roseprof(
        "torch", "--wait", "0", "--warmup", "0", "--active", "100000", *store(tmp_path, "t"), "--", *cmd
    )
    assert nsys.returncode == 0 and torch.returncode == 0, nsys.stderr + torch.stderr
    a = json.loads((only_run(tmp_path / "n") / "summary.json").read_text())
    b = json.loads((only_run(tmp_path / "t") / "summary.json").read_text())
    assert a["steps"]["count"] == b["steps"]["count"] > 0
    assert {r["name"] for r in a["regions"]} == {r["name"] for r in b["regions"]}


def test_tensor_parallel_window_longer_than_the_run_keeps_every_ranks_trace(tmp_path):
    """The default window (8 + 2 + 128 decode steps) outlasts this run, so each rank writes its trace as it exits:
    rank 1 left through os._exit and wrote none, and rank 0 wrote `trace.json.gz` (the process group was gone by
    then), so the run silently held rank 0 alone. Both ranks' files are kept, each named by its rank."""
    # 16 new tokens still fall inside the default window, as 70 did; the ranks' profiled steps are most of the
    # capture's time (70 tokens took ~50% more CPU time, with a trace 10x larger)
    command = engine_command(
        "roseinfer.benchmark_streaming", 2, "--hf-model-id", "gpt2-tiny", "--device", "cpu",
        "--tensor-parallel-size", "2", new_tokens=16,
    )  # fmt: skip
    proc = roseprof("torch", "--name", "tp2", *store(tmp_path), "--", *command)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    run = only_run(tmp_path / "traces")
    assert sorted(p.name for p in (run / "raw" / "torch").iterdir()) == [
        "trace.rank0.json.gz",
        "trace.rank1.json.gz",
    ]
    summary = json.loads((run / "summary.json").read_text())
    assert [(e["rank"], e["rank_from"]) for e in summary["ranks"]] == [(0, "step log"), (1, "step log")]
    assert summary["collectives"]["ranks"][0]["count"] == summary["collectives"]["ranks"][1]["count"] > 0
