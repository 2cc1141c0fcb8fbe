"""nsys capture windows with the real Nsight Systems 2022.4 on CPU: `roseprof nsys --capture-range nvtx
--capture-range-end repeat -- roseinfer serve gpt2-tiny --enable-profiling` records nothing until a window opens;
each window (POST /profile/start {"tool": "nsys"}, or `roseprof live --tool nsys`) is one nsys recording range,
one report holding exactly the window's decode steps and their regions; when the server stops, roseprof nsys keeps
every window's report."""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
import urllib.request

import numpy as np
import pytest

from roseprof.api import open_store
from roseprof.run import tables
from roseprof.workload.roseinfer import DECODE_STEP, WINDOW_NSYS_FILE, WINDOW_RANGE, WINDOW_STEPS_FILE
from tests.helpers import assert_one_line_error, roseprof
from tests.roseinfer.serve.conftest import ServerProcess

pytestmark = pytest.mark.nsys

ENV = {"COLUMNS": "80"}
WINDOWS = (4, 7)  # the two windows opened by hand: their decode steps
LIVE_STEPS = 6  # roseprof live --tool nsys's window


def _under_nsys(traces) -> ServerProcess:
    prefix = (sys.executable, "-m", "roseprof", "nsys", "--capture-range", "nvtx", "--capture-range-end", "repeat",
              "--traces-dir", str(traces), "--dashboards-dir", str(traces.parent / "dashboards"), "--")  # fmt: skip
    return ServerProcess("--enable-profiling", "--max-batch-size", "8", prefix=prefix, env=ENV).wait_ready()


def _traffic(server: ServerProcess, done: threading.Event) -> None:
    while not done.is_set():
        server.post("/v1/completions", {"prompt": "x", "max_tokens": 12, "ignore_eos": True})


def _window(server: ServerProcess, steps: int, into) -> dict:
    """One window of `steps` decode steps, waited for, its files saved into `into`: its status."""
    status, _, body = server.post("/profile/start", {"tool": "nsys", "steps": steps})
    assert status == 200, body
    deadline = time.monotonic() + 300
    while body["state"] not in ("done", "failed"):
        assert time.monotonic() < deadline, body
        time.sleep(0.2)
        body = server.get("/profile/status")[2]["window"]
    assert body["state"] == "done", body
    into.mkdir()
    for name in body["files"]:
        with urllib.request.urlopen(server.url + f"/profile/files/{name}", timeout=60) as resp:
            (into / name).write_bytes(resp.read())
    return body


@pytest.fixture(scope="module")
def nsys_server(tmp_path_factory):
    """Two windows by hand and one `roseprof live --tool nsys`, then the server stopped: what each left."""
    tmp = tmp_path_factory.mktemp("live-nsys")
    traces = tmp / "traces"
    server = _under_nsys(traces)
    done = threading.Event()
    thread = threading.Thread(target=_traffic, args=(server, done))
    thread.start()
    got: dict = {"traces": traces, "windows": []}
    try:
        time.sleep(1.0)  # steps before the first window: nsys must not record them
        for i, steps in enumerate(WINDOWS):
            got["windows"].append((_window(server, steps, tmp / f"window-{i}"), tmp / f"window-{i}"))
            time.sleep(0.5)  # and steps between windows
        # no load of its own: the window opens at once on the traffic and its report is imported (an nsys run)
        got["snapshot"] = roseprof("live", server.url, "--steps", "5", "--tool", "nsys", "--traces-dir", traces,
                                   "--name", "nsys-snapshot", env=ENV)  # fmt: skip
        done.set()
        thread.join()
        got["live"] = roseprof(
            "live", server.url, "--steps", str(LIVE_STEPS), "--tool", "nsys", "--requests", "10", "--concurrency",
            "4", "--output-len", "24", "--traces-dir", traces, "--name", "nsys-window", env=ENV,
        )  # fmt: skip
    finally:
        done.set()
        thread.join()
        server.signal(
            signal.SIGTERM
        )  # roseprof forwards it to nsys as one Ctrl-C: the server drains, nsys writes
        try:
            server.wait(300)
        finally:
            server.stop()
    got["stdout"] = "".join(server.stdout)
    yield got


def _read(folder):
    from roseprof.drivers.nsys.window_stream import read_stream

    trace, _ = read_stream(folder / WINDOW_NSYS_FILE, str(folder / WINDOW_NSYS_FILE))
    return trace


def _named(trace, name: str) -> np.ndarray:
    return np.flatnonzero(trace.ranges.name == trace.names.find(name))


def test_each_window_is_one_report_of_exactly_its_steps(nsys_server):
    from roseprof.api.sections import analyse_trace
    from roseprof.workload.steplog import read_steplog

    for (window, folder), steps in zip(nsys_server["windows"], WINDOWS, strict=True):
        assert window["tool"] == "nsys" and window["steps_done"] == steps and not window["stopped_early"]
        assert sorted(window["files"]) == sorted([WINDOW_STEPS_FILE, WINDOW_NSYS_FILE])
        trace = _read(folder)
        r = trace.ranges
        (whole,) = _named(trace, WINDOW_RANGE)  # one recording range: the window's
        # nothing outside the window: every range nsys recorded lies inside it, the steps before, between and
        # after the windows are in no report
        assert (r.start >= r.start[whole]).all() and (r.end <= r.end[whole]).all()
        decode = _named(trace, DECODE_STEP)
        assert len(decode) == steps
        # the window's step log has the same steps, numbered from the window's first
        log = read_steplog(str(folder / WINDOW_STEPS_FILE))
        assert int(log.meta["first_step"]) == window["first_step"]
        assert [s["index"] for s in log.steps] == list(range(steps))
        # the steps' regions: every decode step holds its forward pass, and the analysis joins the report to the
        # window's step log step for step
        forward = _named(trace, "roseinfer.model.forward")
        inside = [((r.start[forward] >= r.start[d]) & (r.end[forward] <= r.end[d])).sum() for d in decode]
        assert inside == [1] * steps
        summary, _ = analyse_trace(trace, folder / WINDOW_STEPS_FILE)
        assert summary["steps"]["count"] == steps
        assert not [w for w in summary["warnings"] if "step log has" in w], summary["warnings"]


def test_live_tool_nsys_makes_one_run_that_show_and_request_read(nsys_server):
    proc, traces = nsys_server["live"], nsys_server["traces"]
    assert proc.returncode == 0, proc.stderr
    (folder,) = [p for p in traces.iterdir() if "nsys-window" in p.name]
    run = open_store(traces).resolve(folder.name)
    summary = run.summary()  # the sections' checks
    tables.check_stored_run(run.path, run.manifest)
    assert run.manifest["live"]["tool"] == "nsys" and "nsys" in run.manifest["command"]
    capture = summary["live"]["capture"]
    assert capture["tool"] == "nsys" and capture["asked"] == LIVE_STEPS
    assert 0 < capture["steps"] <= LIVE_STEPS and capture["stopped_early"] == (capture["steps"] < LIVE_STEPS)
    first = capture["first_step"]
    detail = summary["live"]["step_detail"]
    assert sorted(map(int, detail)) == list(range(first, first + capture["steps"]))
    assert all(name.startswith("roseinfer.") for name, _ in detail[str(first)]["regions"])
    # the window's regions (nsys driver) beside the client's serving figures; the report kept in raw/window/
    counts = {r["name"]: r["count"] for r in summary["regions"]}
    assert counts[DECODE_STEP] == capture["steps"] and counts[WINDOW_RANGE] == 1
    assert summary["serving"]["completed"] == 10
    assert (folder / "raw" / "window" / "trace.nsys-rep").is_file()
    assert "nsys window: steps" in proc.stdout and "profiler stop" in proc.stdout
    # roseprof request: each token of a request whose steps the window recorded, that step's regions
    tokens = json.loads((folder / tables.LOAD_TOKENS).read_text())
    row = next(r for r in tokens if set(detail) & {str(s) for s in r["steps"]})
    proc = roseprof("request", folder.name, row["request_id"], "--traces-dir", traces, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert "roseinfer." in proc.stdout


def test_roseprof_nsys_keeps_every_windows_report(nsys_server):
    """The server stopped: roseprof nsys stored its run (the last window's report) and every window's report."""
    traces = nsys_server["traces"]
    (folder,) = [p for p in traces.iterdir() if "-nsys-python-" in p.name]  # roseprof nsys' own run
    reports = sorted(p.name for p in (folder / "raw").glob("trace.*.nsys-rep"))
    assert reports == [f"trace.{k}.nsys-rep" for k in (1, 2, 3, 4)], reports  # two by hand, snapshot, live
    run = open_store(traces).resolve(folder.name)
    assert run.manifest["tool"]["name"] == "nsys"
    counts = {r["name"]: r["count"] for r in run.summary()["regions"]}
    assert counts[WINDOW_RANGE] == 1  # the last window's report
    assert run.manifest["nsys"]["capture_range_end"] == "repeat"
    # the server wrote no step log for its whole life (a cost outside the windows): the windows' steps are theirs
    assert not (folder / tables.STEPLOG).exists()


def test_a_window_with_no_load_imports_its_report_and_steps(nsys_server):
    proc, traces = nsys_server["snapshot"], nsys_server["traces"]
    assert proc.returncode == 0, proc.stderr
    (folder,) = [p for p in traces.iterdir() if "nsys-snapshot" in p.name]
    run = open_store(traces).resolve(folder.name)
    assert run.manifest["tool"]["name"] == "nsys"
    summary = run.summary()
    assert summary["steps"]["count"] == 5
    assert {r["name"]: r["count"] for r in summary["regions"]}[DECODE_STEP] == 5
    tables.check_stored_run(run.path, run.manifest)


def test_nsys_window_on_a_server_not_under_nsys_is_one_line(tmp_path):
    server = ServerProcess("--enable-profiling", "--max-batch-size", "4").wait_ready()
    try:
        status, _, body = server.post("/profile/start", {"tool": "nsys", "steps": 3})
        proc = roseprof(
            "live", server.url, "--steps", "3", "--tool", "nsys", "--traces-dir", tmp_path / "t", env=ENV
        )
    finally:
        server.stop()
    assert (
        status == 400
        and "roseprof nsys --capture-range nvtx --capture-range-end repeat" in body["error"]["message"]
    )
    assert "\n" not in body["error"]["message"]
    assert_one_line_error(proc, 2, "roseprof nsys --capture-range nvtx --capture-range-end repeat")
