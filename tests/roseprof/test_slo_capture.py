"""SLO-triggered capture end to end: `roseinfer serve --capture-on itl=100ms` (gpt2-tiny on CPU) with a decode step
made 300 ms slower (CPU time) one step in 50, under load from `roseprof load`; `roseprof import` of the capture
folder makes each file a run whose `show` starts with the breached requests, the planted step and its region.
(A busy 2-core box may stall some other step past 100 ms too: the planted steps must be among the captures, and
every capture names its breach.)"""

from __future__ import annotations

import json

from tests.helpers import roseprof
from tests.roseinfer.serve.conftest import ServerProcess

ENV = {"COLUMNS": "80"}
# The SLO capture is always on, so the region it names needs the region clocks always on (the planted slowdown
# turns none on: a steps window turns them on for its own steps, test_live.py)
PLANTED = {
    "ROSEINFER_TEST_BUSY_REGION": "roseinfer.decode_step:300",
    "ROSEINFER_TEST_SLOW_EVERY": "50",
    "ROSEINFER_REGION_CLOCKS": "1",
}


def test_a_planted_slow_step_is_captured_and_imported_as_runs_that_name_it(tmp_path):
    captures = tmp_path / "captures"
    server = ServerProcess(
        "--max-batch-size", "8", "--capture-on", "itl=100ms", "--capture-dir", str(captures),
        "--capture-steps-before", "8", "--capture-steps-after", "4", "--capture-interval", "0", env=PLANTED,
    ).wait_ready()  # fmt: skip
    try:
        load = roseprof(
            "load", server.url, "--requests", "20", "--concurrency", "4", "--prompt-len", "8", "--output-len", "24",
            "--traces-dir", tmp_path / "loads", env=ENV,
        )  # fmt: skip
        assert load.returncode == 0, load.stderr
    finally:
        server.stop()  # drains: the core writes what it holds before it exits
    assert server.proc.returncode == 0, "".join(server.stderr)[-2000:]
    files = sorted(captures.glob("*.jsonl"))
    assert files, list(captures.iterdir())
    assert not list(captures.glob(".*")), "a half-written capture was left"
    proc = roseprof(
        "import",
        captures,
        "--traces-dir",
        tmp_path / "traces",
        "--dashboards-dir",
        tmp_path / "dash",
        env=ENV,
    )
    assert proc.returncode == 0, proc.stderr
    runs = sorted((tmp_path / "traces").iterdir())
    assert len(runs) == len(files)
    planted = []
    for run in runs:
        manifest = json.loads((run / "manifest.json").read_text())
        assert manifest["tool"]["name"] == "steps"
        part = json.loads((run / "summary.json").read_text())["slo_capture"]
        assert part["breaches"] and all(b["ms"] > 100 for b in part["breaches"])
        planted += [(run, b) for b in part["breaches"] if b["step"] % 50 == 49]
    assert planted, "no capture names a planted step (49, 99, ...)"
    run, breach = planted[0]
    # the region that grew, in the spike causes' words
    assert "roseinfer.decode_step +" in breach["line"], breach
    shown = roseprof("show", run.name, "--traces-dir", tmp_path / "traces", env=ENV)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    # show starts with the breaches: the first line after the run's id names a request, the limit and the step
    assert lines[1].startswith("req cmpl-") and "> 100 ms" in lines[1], shown.stdout[:800]
    head = " ".join(" ".join(lines[1:12]).split())  # the lines as wrapped at 80 columns, joined
    assert f"req {breach['request_id']}: ITL" in head and f"step {breach['step']}:" in head, head


def test_only_a_folder_of_step_logs_alone_is_one_run_per_file(tmp_path):
    """A folder of rank traces with the engine's step log beside it stays one run of several ranks."""
    from roseprof.api.captures import step_log_files

    log = '{"type":"meta","version":3,"clock":"monotonic_ns"}\n'
    (tmp_path / "slo-1-1.jsonl").write_text(log)
    (tmp_path / ".slo-2-2.tmp").write_text(log[:10])  # a capture being written: never read
    (tmp_path / "notes.txt").write_text("x")
    assert step_log_files([str(tmp_path)]) == [tmp_path / "slo-1-1.jsonl"]
    assert step_log_files([str(tmp_path / "slo-1-1.jsonl")]) is None  # a file: imported as before
    (tmp_path / "rank-0.pt.trace.json.gz").write_bytes(b"")
    assert step_log_files([str(tmp_path)]) is None
