"""GET /debug/steps: the flight recorder's records, the step log's own shapes, read by roseprof's reader."""

from __future__ import annotations

import json
import subprocess
import sys

from roseprof.workload.steplog import read_steplog
from tests.roseinfer.serve.conftest import REPO, ServerProcess


def _complete(server, n: int = 3, max_tokens: int = 6, headers=None) -> list[str]:
    ids = []
    for i in range(n):
        status, _, body = server.post(
            "/v1/completions",
            {"model": "gpt2-tiny", "prompt": f"hello {i}", "max_tokens": max_tokens, "ignore_eos": True},
            headers=headers,
        )
        assert status == 200, body
        ids.append(body["id"])
    return ids


def _records(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line]


def test_debug_steps_are_the_step_logs_records(server, steplog_path, tmp_path):
    ids = _complete(server)
    status, headers, text = server.get("/debug/steps")
    assert status == 200 and headers["content-type"].startswith("application/x-ndjson")
    records = _records(text)
    assert records[0]["type"] == "meta" and records[0]["flight_recorder_steps"] == 4096
    steps = [r for r in records if r["type"] == "step"]
    assert steps and [s["index"] for s in steps] == list(range(steps[0]["index"], steps[-1]["index"] + 1))
    # the same step records as the step log's file (the second sink of the same records)
    logged = {r["index"]: r for r in _records(steplog_path.read_text()) if r["type"] == "step"}
    assert all(logged[s["index"]] == s for s in steps if s["index"] in logged)
    named = {r["request_id"] for r in records if r["type"] == "request"}
    assert set(ids) <= named
    # roseprof's step-log reader takes it as it is
    saved = tmp_path / "steps.jsonl"
    saved.write_text(text)
    parsed = read_steplog(str(saved))
    assert len(parsed.steps) == len(steps) and not parsed.bad_lines


def test_debug_steps_last_and_bad_last(server):
    _complete(server, n=1)
    status, _, text = server.get("/debug/steps?last=2")
    assert status == 200
    assert sum(r["type"] == "step" for r in _records(text)) == 2
    status, _, body = server.get("/debug/steps?last=-3")
    assert status == 400 and body["error"]["param"] == "last"


def test_ring_keeps_n_steps_and_needs_the_key():
    s = ServerProcess("--flight-recorder-steps", "5", "--api-key", "k").wait_ready()
    try:
        key = {"Authorization": "Bearer k"}
        assert s.get("/debug/steps")[0] == 401
        _complete(s, n=2, max_tokens=8, headers=key)
        status, _, text = s.get("/debug/steps", headers=key)
        assert status == 200
        assert sum(r["type"] == "step" for r in _records(text)) == 5
    finally:
        s.stop()


def test_bad_flight_recorder_steps_is_one_line():
    out = subprocess.run(
        [sys.executable, "-m", "roseinfer.serve", "gpt2-tiny", "--flight-recorder-steps", "-1"],
        capture_output=True, text=True, cwd=REPO, timeout=120, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin"},
    )  # fmt: skip
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and "flight_recorder_steps" in out.stderr
