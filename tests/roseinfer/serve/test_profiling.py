"""Capture windows (`roseinfer serve --enable-profiling`: POST /profile/start|stop, GET /profile/status, GET
/profile/files/NAME): off by default, one window at a time, exactly N decode steps, bad input a 400 in one line.
torch.profiler runs on CPU, where the CPU operators are what a window records."""

from __future__ import annotations

import gzip
import json
import threading
import time
import urllib.request

import pytest

from roseprof.drivers.torch.reader import read_kineto
from roseprof.workload.roseinfer import DECODE_STEP
from tests.roseinfer.serve.conftest import ServerProcess


@pytest.fixture(scope="module")
def profiling():
    s = ServerProcess("--enable-profiling", "--max-batch-size", "4").wait_ready()
    yield s
    s.stop()


def _generate(server, n: int = 2, max_tokens: int = 12) -> None:
    for i in range(n):
        status, _, body = server.post(
            "/v1/completions", {"prompt": f"hi {i}", "max_tokens": max_tokens, "ignore_eos": True}
        )
        assert status == 200, body


def _closed(server, timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        status, _, body = server.get("/profile/status")
        assert status == 200, body
        window = body["window"]
        if window["state"] in ("done", "failed") or time.monotonic() > deadline:
            return window
        time.sleep(0.1)


def _file(server, name: str) -> bytes:
    with urllib.request.urlopen(f"{server.url}/profile/files/{name}", timeout=60) as resp:
        return resp.read()


def _one_line(body) -> str:
    message = body["error"]["message"]
    assert "\n" not in message and "Traceback" not in message
    return message


def test_profile_routes_are_404_without_enable_profiling(server):
    for method, path in (("POST", "/profile/start"), ("POST", "/profile/stop"), ("GET", "/profile/status")):
        status, _, body = server.request(method, path, {"tool": "steps", "steps": 3})
        assert status == 404, (path, body)
        assert "--enable-profiling" in _one_line(body)


@pytest.mark.parametrize(
    "body, words",
    [
        ({"tool": "nsight", "steps": 3}, "tool must be one of steps, torch, nsys"),
        ({"tool": "steps", "steps": 0}, "steps must be an integer > 0"),
        ({"tool": "steps", "steps": -2}, "steps must be an integer > 0"),
        ({"tool": "torch", "steps": "5"}, "steps must be an integer > 0"),
        ({"tool": "torch"}, "steps must be an integer > 0"),
        (b"not json", "the body is not JSON"),
        ([1, 2], "the body must be a JSON object"),
    ],
)
def test_bad_start_is_a_400_in_one_line(profiling, body, words):
    status, _, answer = profiling.post("/profile/start", body)
    assert status == 400, answer
    assert words in _one_line(answer)


def test_stop_with_no_window_is_a_400(profiling):
    status, _, body = profiling.get("/profile/status")
    assert status == 200 and (body["window"] is None or body["window"]["state"] != "recording")
    status, _, body = profiling.post("/profile/stop", {})
    assert status == 400 and "no window is open" in _one_line(body)


def test_a_steps_window_covers_exactly_n_decode_steps_and_a_second_start_is_a_409(profiling):
    status, _, window = profiling.post("/profile/start", {"tool": "steps", "steps": 5})
    assert status == 200 and window["state"] == "recording" and window["steps_done"] == 0
    status, _, body = profiling.post("/profile/start", {"tool": "torch", "steps": 5})
    assert status == 409 and "one window at a time" in _one_line(body)
    _generate(profiling, n=2, max_tokens=12)  # 2 x 11 decode steps, one request at a time: more than 5
    window = _closed(profiling)
    assert window["state"] == "done" and window["steps_done"] == 5 and not window["stopped_early"]
    assert window["files"] == ["steps.jsonl"]
    records = [json.loads(line) for line in _file(profiling, "steps.jsonl").splitlines()]
    steps = [r["index"] for r in records if r["type"] == "step"]
    assert records[0]["type"] == "meta"
    assert steps == list(range(window["first_step"], window["first_step"] + 5))
    status, _, body = profiling.get("/profile/files/trace.json.gz")
    assert status == 404 and "no file" in _one_line(body)


def test_a_steps_window_times_the_regions_of_its_own_steps_only(profiling):
    """A plain server (no profiler, no switch that turns the regions on): the window turns the engine's region
    clocks on for its N steps, whose records then carry each region's own host time, and off after them."""
    status, _, window = profiling.post("/profile/start", {"tool": "steps", "steps": 4})
    assert status == 200
    _generate(profiling, n=2, max_tokens=8)  # 2 x 7 decode steps: the window's 4, then 10 with the clocks off
    window = _closed(profiling)
    first, last = window["first_step"], window["first_step"] + 3
    records = [json.loads(line) for line in _file(profiling, "steps.jsonl").splitlines()]
    timed = [r for r in records if r["type"] == "step"]
    assert len(timed) == 4 and all(r["host_own_ns"][DECODE_STEP] > 0 for r in timed)
    status, _, text = profiling.get("/debug/steps")  # the flight recorder: the same steps, and the ones after
    assert status == 200
    steps = {r["index"]: r for r in map(json.loads, text.splitlines()) if r["type"] == "step"}
    assert all("host_own_ns" in steps[k] for k in range(first, last + 1))
    after = [r for k, r in steps.items() if k > last]
    assert len(after) == 10 and not any("host_own_ns" in r or "cpu_own_ns" in r for r in after)


def test_stop_ends_a_window_early_with_the_steps_done(profiling):
    status, _, window = profiling.post("/profile/start", {"tool": "steps", "steps": 1000})
    assert status == 200
    _generate(profiling, n=1, max_tokens=6)
    status, _, window = profiling.post("/profile/stop", {})
    assert status == 200 and window["stopped_early"]
    window = _closed(profiling)
    assert window["state"] == "done" and window["steps_done"] == 5  # 6 tokens: a prefill and 5 decode steps
    records = [json.loads(line) for line in _file(profiling, "steps.jsonl").splitlines()]
    assert sum(r["type"] == "step" for r in records) == 5


def test_a_torch_window_records_its_n_steps_off_the_loop(profiling, tmp_path):
    status, _, window = profiling.post("/profile/start", {"tool": "torch", "steps": 4})
    assert status == 200
    load = threading.Thread(target=_generate, args=(profiling, 2, 8))
    load.start()
    load.join()
    window = _closed(profiling)
    assert window["state"] == "done" and window["steps_done"] == 4, window
    assert window["files"] == ["steps.jsonl", "trace.json.gz"]
    pause = window["pause"]
    assert {"start_ms", "stop_ms", "dump_ms", "export_ms", "longest_step_during_export_ms"} <= set(pause)
    raw = _file(profiling, "trace.json.gz")
    assert json.loads(gzip.decompress(raw))["traceEvents"]
    path = tmp_path / "trace.json.gz"
    path.write_bytes(raw)
    trace = read_kineto(path)
    # the window's four decode steps are the trace's decode-step ranges, and its CPU operators are there
    step_name = trace.names.values.index(DECODE_STEP)
    assert int((trace.ranges.name == step_name).sum()) == 4
    assert len(trace.host_events) > 0
    # the server serves on after the window: regions are off again, requests complete
    _generate(profiling, n=1, max_tokens=4)
