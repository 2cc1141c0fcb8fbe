"""Capture windows on a tensor-parallel server (`roseinfer serve --tensor-parallel-size 2 --enable-profiling`,
gpt2-tiny on CPU, gloo): a window opens and closes on every rank at the same decode step (rank 0 decides, the
workers apply it between the same steps), each rank's files come back over HTTP, and `roseprof live` stores ONE run
of two ranks whose checks hold: the ranks' step counts agree, each rank's operators and regions are its own."""

from __future__ import annotations

import gzip
import json
import threading
import time

import pytest

from roseprof.api import open_store
from roseprof.run import tables
from tests.helpers import assert_one_line_error, roseprof
from tests.roseinfer.serve.conftest import ServerProcess

ENV = {"COLUMNS": "80"}
WINDOW = 8  # decode steps
TP2 = ("--tensor-parallel-size", "2", "--device", "cpu", "--enable-profiling", "--max-batch-size", "8")
LOAD = ("--requests", "12", "--concurrency", "4", "--output-len", "32")


@pytest.fixture(scope="module")
def server():
    s = ServerProcess(*TP2).wait_ready()
    try:
        yield s
    finally:
        s.stop()


class Traffic:
    """Requests from threads of the test until stopped: steps for a window that no load of roseprof drives."""

    def __init__(self, server: ServerProcess, streams: int = 2) -> None:
        self.server, self.done = server, threading.Event()
        self.threads = [threading.Thread(target=self._run) for _ in range(streams)]

    def _run(self) -> None:
        while not self.done.is_set():
            self.server.post("/v1/completions", {"prompt": "x", "max_tokens": 12, "ignore_eos": True})

    def __enter__(self) -> Traffic:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc) -> None:
        self.done.set()
        for t in self.threads:
            t.join()


def _live(server: ServerProcess, traces, tool: str, *load: str):
    proc = roseprof("live", server.url, "--steps", str(WINDOW), "--tool", tool, *load, "--traces-dir", traces,
                    "--name", f"tp-{tool}", env=ENV)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (folder,) = [p for p in traces.iterdir() if f"tp-{tool}" in p.name]
    run = open_store(traces).resolve(folder.name)
    tables.check_stored_run(run.path, run.manifest)  # the store's files
    return proc, run, run.summary()  # the sections' checks


def _step_logs(folder) -> dict[int, list[dict]]:
    """{rank: its window log's step records}, read from the files the run keeps."""
    out = {}
    for path in sorted(folder.glob("steps*.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        out[records[0]["rank"]] = [r for r in records if r["type"] == "step"]
    return out


def _assert_two_ranks_of_window_steps(summary: dict) -> None:
    """The ranks section's view of a torch window: two ranks, each its own process with WINDOW steps joined to
    its own log, its own operators and regions, and the collectives of every step matched across them."""
    ranks = summary["ranks"]
    assert [r["rank"] for r in ranks] == [0, 1]
    assert len({r["pid"] for r in ranks}) == 2 and all(r["world_size"] == 2 for r in ranks)
    assert all(r["rank_from"] == "step log" for r in ranks)
    assert [r["steps"]["count"] for r in ranks] == [WINDOW, WINDOW]
    assert all(r["range_count"] > 0 and r["regions"] for r in ranks)
    assert not summary["rank_clock"]["doubts"] and summary["rank_clock"]["kernels_of_no_rank"] == 0
    coll = summary["collectives"]
    assert coll["matched_steps"] == WINDOW and coll["unmatched_steps"] == 0
    assert [r["count"] for r in coll["ranks"]][0] == [r["count"] for r in coll["ranks"]][1] > 0


def test_torch_window_on_two_ranks_is_one_run_of_two_ranks(server, tmp_path):
    proc, run, summary = _live(server, tmp_path / "traces", "torch", *LOAD)
    capture = summary["live"]["capture"]
    assert capture["tool"] == "torch" and capture["steps"] == WINDOW and not capture["stopped_early"]
    first = capture["first_step"]
    span = {"steps": WINDOW, "first_step": first, "last_step": first + WINDOW - 1}
    assert [{k: r[k] for k in span} for r in capture["ranks"]] == [span, span]
    assert [r["rank"] for r in capture["ranks"]] == [0, 1] and all(r["stop_ms"] > 0 for r in capture["ranks"])
    window = run.path / "raw" / "window"
    assert sorted(p.name for p in window.iterdir()) == [
        "steps.jsonl", "steps.rank1.jsonl", "trace.json.gz", "trace.rank1.json.gz",
    ]  # fmt: skip
    for name in ("trace.json.gz", "trace.rank1.json.gz"):  # each rank's Kineto file says its rank
        info = json.loads(gzip.decompress((window / name).read_bytes()))["distributedInfo"]
        assert info["rank"] == (0 if name == "trace.json.gz" else 1) and info["world_size"] == 2
    logs = _step_logs(window)
    assert (
        [s["index"] for s in logs[0]] == [s["index"] for s in logs[1]] == list(range(first, first + WINDOW))
    )
    assert [s["requests"] for s in logs[0]] == [s["requests"] for s in logs[1]]  # the same batches
    _assert_two_ranks_of_window_steps(summary)
    # the per-step detail is rank 0's (its steps), not both ranks' summed
    assert sorted(map(int, summary["live"]["step_detail"])) == list(range(first, first + WINDOW))
    assert "the window on 2 ranks: 8 decode steps each" in proc.stdout
    assert summary["serving"]["completed"] == 12 and summary["live"]["join"]["outside_window"] == 0
    # `roseprof request` reads it: one line a token, the window's steps with their operators
    tokens = json.loads((run.path / tables.LOAD_TOKENS).read_text())
    row = next(r for r in tokens if set(range(first, first + WINDOW)) & set(r["steps"]))
    shown = roseprof("request", run.id, row["request_id"], "--traces-dir", tmp_path / "traces", env=ENV)
    assert shown.returncode == 0, shown.stderr
    assert sum(line.strip()[:1].isdigit() for line in shown.stdout.splitlines()) == len(row["steps"])
    assert any(line.strip().startswith("CPU ops aten::") for line in shown.stdout.splitlines())


def test_steps_tool_on_two_ranks_takes_every_ranks_steps(server, tmp_path):
    """`--tool steps` on a tensor-parallel server: the flight recorder is rank 0's, so the run takes a steps window
    on every rank; no profiler, each rank's window log in the run, each rank's steps with its regions' host times
    (the window turns the region clocks on on every rank)."""
    proc, run, summary = _live(server, tmp_path / "traces", "steps", *LOAD)
    capture = summary["live"]["capture"]
    assert capture["tool"] == "steps" and capture["steps"] == WINDOW
    assert [(r["rank"], r["steps"]) for r in capture["ranks"]] == [(0, WINDOW), (1, WINDOW)]
    logs = _step_logs(run.path / "raw" / "window")
    assert [s["index"] for s in logs[0]] == [s["index"] for s in logs[1]]
    for rank in (0, 1):
        assert all(s["host_own_ns"]["roseinfer.decode_step"] > 0 for s in logs[rank]), rank
    assert "ranks" not in summary or not summary["ranks"]  # no trace: nothing of a profiler's
    assert run.manifest["live"]["tool"] == "steps" and "--tool" not in run.manifest["command"]
    assert "the window on 2 ranks: 8 decode steps each" in proc.stdout
    shown = roseprof("show", run.id, "--traces-dir", tmp_path / "traces", env=ENV)
    assert shown.returncode == 0 and "the window on 2 ranks" in shown.stdout


def test_a_window_with_no_load_imports_both_ranks(server, tmp_path):
    """No load: the window opens at once on the server's traffic; its two traces and logs are one torch run."""
    with Traffic(server):
        proc = roseprof("live", server.url, "--steps", str(WINDOW), "--tool", "torch",
                        "--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path, env=ENV)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (folder,) = list((tmp_path / "traces").iterdir())
    run = open_store(tmp_path / "traces").resolve(folder.name)
    tables.check_stored_run(run.path, run.manifest)
    summary = run.summary()
    assert run.manifest["tool"]["name"] == "torch" and summary["steps"]["count"] == WINDOW
    assert (run.path / "steplog.rank1.jsonl").is_file()  # rank 1's log is kept in the run
    _assert_two_ranks_of_window_steps(summary)


def test_a_stop_mid_window_ends_every_ranks_window(server):
    with Traffic(server):
        status, _, opened = server.post("/profile/start", {"tool": "steps", "steps": 4000})
        assert status == 200 and opened["world_size"] == 2
        while server.get("/profile/status")[2]["window"]["steps_done"] < 3:
            time.sleep(0.1)
        status, _, stopped = server.post("/profile/stop", None)
        assert status == 200 and stopped["stopped_early"]
        window = _wait_closed(server)
    assert window["state"] == "done", window
    done = window["steps_done"]
    assert 3 <= done < 4000
    assert [(r["rank"], r["steps_done"], r["first_step"]) for r in window["ranks"]] == [
        (0, done, window["first_step"]), (1, done, window["first_step"]),
    ]  # fmt: skip
    assert window["files"] == ["steps.jsonl", "steps.rank1.jsonl"]
    counts = []
    for name in window["files"]:  # each rank's file over HTTP: the same steps
        status, _, body = server.get(f"/profile/files/{name}")
        assert status == 200
        steps = [json.loads(line) for line in body.splitlines() if '"type":"step"' in line]
        counts.append([s["index"] for s in steps])
    assert counts[0] == counts[1] and len(counts[0]) == done


def _wait_closed(server: ServerProcess) -> dict:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        window = server.get("/profile/status")[2]["window"]
        if window["state"] in ("done", "failed"):
            return window
        time.sleep(0.1)
    raise AssertionError(f"the window did not close: {window}")


def test_a_failing_rank_fails_the_window_in_one_line_and_the_server_serves_on(tmp_path):
    s = ServerProcess(*TP2, env={"ROSEINFER_TEST_FAIL_WINDOW_RANK": "1"}).wait_ready()
    try:
        with Traffic(s):
            proc = roseprof("live", s.url, "--steps", "4", "--tool", "torch", "--traces-dir", tmp_path / "traces",
                            env=ENV)  # fmt: skip
            assert_one_line_error(proc, 2, "rank 1: the window's export failed")
            assert "ROSEINFER_TEST_FAIL_WINDOW_RANK" in proc.stderr
            assert not (tmp_path / "traces").exists() or not any((tmp_path / "traces").iterdir())
            # the server serves on, and every rank's window is closed: the next window is taken (and fails alike)
            status, _, body = s.post("/v1/completions", {"prompt": "still", "max_tokens": 4})
            assert status == 200 and len(body["choices"][0]["token_ids"]) == 4
            assert s.get("/health")[0] == 200
            status, _, opened = s.post("/profile/start", {"tool": "steps", "steps": 2})
            assert status == 200, opened
            window = _wait_closed(s)
            assert window["state"] == "failed" and window["error"].startswith("rank 1: ")
    finally:
        s.stop()
    assert s.proc.returncode == 0  # drained and stopped as usual


def test_steps_on_a_server_without_profiling_say_they_are_rank_0s(tmp_path):
    """Without --enable-profiling there is no window: `--tool steps` reads the flight recorder, rank 0's alone,
    and the run says so."""
    s = ServerProcess(*(a for a in TP2 if a != "--enable-profiling")).wait_ready()
    try:
        traces = tmp_path / "traces"
        proc = roseprof("live", s.url, "--steps", "50", "--requests", "4", "--concurrency", "2", "--output-len", "8",
                        "--traces-dir", traces, env=ENV)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        (folder,) = list(traces.iterdir())
        summary = open_store(traces).resolve(folder.name).summary()
        assert any("rank 0's steps only" in w and "--enable-profiling" in w for w in summary["warnings"])
        assert "capture" not in summary["live"] and summary["live"]["join"]["joined"] > 0
        assert not (folder / "raw" / "window").exists()
    finally:
        s.stop()


def test_an_nsys_window_on_a_tensor_parallel_server_is_refused_in_one_line(server):
    """An nsys window's range is opened on rank 0's loop alone: half a window, so refused, never misleading."""
    status, _, body = server.post("/profile/start", {"tool": "nsys", "steps": 4})
    assert status == 400, body
    message = body["error"]["message"]
    assert "tensor parallelism" in message and "\n" not in message
    window = server.get("/profile/status")[2]["window"]
    assert window is None or window["tool"] != "nsys"
