"""The server's life: bad command lines, the API key, a full queue, SIGTERM's drain, an engine failure."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time

import torch

from tests.roseinfer.serve.conftest import REPO, ServerProcess, free_port

# Every decode step sleeps this long (ms): requests stay in flight long enough to act on them mid-way.
SLOW = {"ROSEINFER_TEST_SLEEP_REGION": "roseinfer.decode_step:20"}


def _serve_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "roseinfer.serve", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )


def test_bad_model_and_port_in_use_are_one_line_exit_2():
    out = _serve_cli("no-such-model", "--port", str(free_port()))
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "no-such-model" in out.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        out = _serve_cli("gpt2-tiny", "--port", str(taken.getsockname()[1]))
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "cannot listen" in out.stderr
    if (
        not torch.cuda.is_available()
    ):  # an engine that cannot be built from the options: the same, after the build
        out = _serve_cli("gpt2-tiny", "--port", str(free_port()), "--device", "cuda")
        assert out.returncode == 2
        assert out.stderr.strip().count("\n") == 0 and "cannot build the engine" in out.stderr


def test_a_port_past_65535_is_a_usage_error_not_a_traceback():
    out = _serve_cli("gpt2-tiny", "--port", "99999")
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert "--port must be" in out.stderr and "65535" in out.stderr


def test_a_pool_smaller_than_one_context_is_refused_at_start():
    """--num-blocks that cannot hold one request of the model's whole context would fail the engine (and every
    request in flight) the first time a long prompt came: refused at start, in one line."""
    out = _serve_cli("gpt2-tiny", "--port", str(free_port()), "--num-blocks", "4")
    assert out.returncode == 2
    assert out.stderr.strip().count("\n") == 0 and "--num-blocks 4 cannot hold one request" in out.stderr


def test_python_m_roseinfer_serve_help():
    out = subprocess.run(
        [sys.executable, "-m", "roseinfer", "serve", "--help"], capture_output=True, text=True, timeout=120, cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    assert out.returncode == 0
    for flag in ("--paged-attn", "--cuda-graph", "--max-batch-size", "--api-key", "--max-waiting"):
        assert flag in out.stdout  # the engine flags come from the benchmarks' parser
    assert "--num-requests" not in out.stdout


def _open_stream(
    server: ServerProcess, max_tokens: int, headers: dict | None = None
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    """A streaming request whose first event has arrived (so it is in the engine)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
    body = {"prompt": "x", "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True, "stream": True}
    conn.request(
        "POST", "/v1/completions", json.dumps(body), {"Content-Type": "application/json", **(headers or {})}
    )
    resp = conn.getresponse()
    assert resp.status == 200
    assert resp.readline().startswith(b"data: ")
    return conn, resp


def _rest_of_stream(resp: http.client.HTTPResponse) -> list:
    events = []
    for line in resp:
        if line.startswith(b"data: "):
            payload = line[6:].strip()
            events.append(payload.decode() if payload == b"[DONE]" else json.loads(payload))
    return events


def test_api_key_guards_every_route_but_health_and_a_full_queue_is_a_503(tmp_path):
    key = {"Authorization": "Bearer sesame"}
    (tmp_path / "key").write_text("sesame\n")
    s = ServerProcess(
        "--api-key-file", str(tmp_path / "key"), "--max-batch-size", "1", "--max-waiting", "1", env=SLOW
    ).wait_ready()
    try:
        assert s.get("/health")[0] == 200
        for path in ("/v1/models", "/metrics", "/version"):
            status, _, body = s.get(path)
            assert status == 401 and body["error"]["type"] == "authentication_error"
            assert s.get(path, headers={"Authorization": "Bearer wrong"})[0] == 401
            assert s.get(path, headers=key)[0] == 200
        assert s.post("/v1/completions", {"prompt": "x", "max_tokens": 2})[0] == 401
        assert s.post("/v1/completions", {"prompt": "x", "max_tokens": 2}, headers=key)[0] == 200
        # Without --chat-template: GPT-2 ships none, and the answer says so.
        chat = {"messages": [{"role": "user", "content": "hi"}]}
        status, _, out = s.post("/v1/chat/completions", chat, headers=key)
        assert status == 400 and out["error"]["code"] == "no_chat_template"
        assert "--chat-template" in out["error"]["message"]

        running = _open_stream(s, 300, key)  # in the batch of one (its first token is out)
        waiting = http.client.HTTPConnection("127.0.0.1", s.port, timeout=60)
        body = json.dumps({"prompt": "x", "max_tokens": 2, "stream": True})
        waiting.request("POST", "/v1/completions", body, {"Content-Type": "application/json", **key})
        assert (
            waiting.getresponse().status == 200
        )  # queued (its headers leave once it is admitted to the queue)
        # One more is past --max-waiting 1.
        status, headers, out = s.post("/v1/completions", {"prompt": "x", "max_tokens": 2}, headers=key)
        assert status == 503
        assert {k.lower(): v for k, v in headers.items()}.get("retry-after") == "1"
        assert out["error"]["code"] == "queue_full"
        # A batch of more prompts than the queue can ever hold is the client's mistake (400), not a busy server.
        status, _, out = s.post("/v1/completions", {"prompt": ["a", "b"], "max_tokens": 2}, headers=key)
        assert status == 400 and "--max-waiting" in out["error"]["message"]
        running[0].close()
        waiting.close()
    finally:
        s.stop()


def test_request_timeout_then_sigterm_drains_in_flight_requests_and_exits_0():
    s = ServerProcess("--request-timeout", "3", env=SLOW).wait_ready()
    try:
        # 500 steps of 20 ms: past --request-timeout 3, answered 408 and taken out of the engine.
        status, _, body = s.post("/v1/completions", {"prompt": "x", "max_tokens": 500, "ignore_eos": True})
        assert status == 408 and "timed out" in body["error"]["message"]
        deadline = time.monotonic() + 30
        while s.metric("roseinfer:num_requests_running") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert s.metric("roseinfer:num_requests_running") == 0
        # Streamed, the same: the timeout ends the stream with an error event and takes the request out of the
        # engine (it kept its batch slot and KV blocks to the end once, the client long gone).
        conn, resp = _open_stream(s, 500)
        events = _rest_of_stream(resp)
        assert "timed out" in events[-1]["error"]["message"]
        conn.close()
        deadline = time.monotonic() + 30
        while s.metric("roseinfer:num_requests_running") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert s.metric("roseinfer:num_requests_running") == 0
        assert s.metric("roseinfer:kv_cache_usage_perc") == 0
        conn, resp = _open_stream(s, 40)
        s.signal(signal.SIGTERM)
        # Draining: new requests get 503 and /health says so, while the stream in flight runs to its end.
        status, _, body = s.post("/v1/completions", {"prompt": "x", "max_tokens": 2})
        assert status == 503 and "shutting down" in body["error"]["message"]
        assert s.get("/health")[0] == 503
        events = _rest_of_stream(resp)
        assert events[-1] == "[DONE]"
        assert events[-2]["choices"][0]["finish_reason"] == "length"
        conn.close()
        assert s.wait(60) == 0
        assert "Traceback" not in "".join(s.stderr)
    finally:
        s.stop()


def test_drain_timeout_ends_what_is_left_and_exits_0():
    s = ServerProcess("--drain-timeout", "0.5", env=SLOW).wait_ready()
    try:
        conn, resp = _open_stream(s, 900)  # ~18 s of steps: far past the drain timeout
        s.signal(signal.SIGINT)
        _rest_of_stream(resp)  # the stream ends (cut) rather than running for its 900 tokens
        conn.close()
        assert s.wait(60) == 0
    finally:
        s.stop()


def test_engine_failure_fails_requests_and_exits_nonzero():
    s = ServerProcess(env={**SLOW, "ROSEINFER_TEST_FAIL_STEP": "5"}).wait_ready()
    try:
        conn, resp = _open_stream(s, 50)
        events = _rest_of_stream(resp)
        assert "error" in events[-1] and "injected engine failure" in events[-1]["error"]["message"]
        assert "[DONE]" not in events
        conn.close()
        assert s.wait(60) == 1
        assert "injected engine failure" in "".join(s.stderr)
    finally:
        s.stop()


def test_engine_failure_answers_a_waiting_request_500():
    s = ServerProcess(env={**SLOW, "ROSEINFER_TEST_FAIL_STEP": "5"}).wait_ready()
    try:
        status, _, body = s.post("/v1/completions", {"prompt": "x", "max_tokens": 50, "ignore_eos": True})
        assert status == 500
        assert body["error"]["code"] == "engine_failed"
        assert "\n" not in body["error"]["message"]
        assert s.wait(60) == 1
    finally:
        s.stop()


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True)
    return [int(x) for x in out.stdout.split()]


def test_a_killed_engine_core_fails_requests_and_exits_1():
    # The engine's loop runs in a process of its own: its death (a kill, an out-of-memory kill) is an engine
    # failure as a raised error is: the open stream ends with an error event, the server exits 1 in one line.
    s = ServerProcess(env=SLOW).wait_ready()
    try:
        conn, resp = _open_stream(s, 200)
        cores = [
            pid
            for pid in _children(s.proc.pid)
            if "roseinfer" in _cmdline(pid) or "multiprocessing" in _cmdline(pid)
        ]
        assert cores, "the server started no engine core process"
        for pid in cores:
            os.kill(pid, signal.SIGKILL)
        events = _rest_of_stream(resp)
        assert "error" in events[-1] and "engine failed" in events[-1]["error"]["message"]
        conn.close()
        assert s.wait(60) == 1
        err = "".join(s.stderr)
        assert "killed by signal 9" in err and "Traceback" not in err
    finally:
        s.stop()


def _cmdline(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_health_fails_while_a_step_runs_past_the_stall_timeout():
    # Every decode step sleeps 1.5 s, past --stall-timeout 0.5: /health says so during a step.
    s = ServerProcess(
        "--stall-timeout", "0.5", env={"ROSEINFER_TEST_SLEEP_REGION": "roseinfer.decode_step:1500"}
    )
    s.wait_ready()
    try:
        conn, resp = _open_stream(s, 3)
        seen = None
        deadline = time.monotonic() + 60
        while seen is None and time.monotonic() < deadline:
            status, _, body = s.get("/health")
            if status == 503:
                seen = body["error"]["message"]
            time.sleep(0.2)
        assert seen is not None and "stalled" in seen
        assert _rest_of_stream(resp)[-1] == "[DONE]"  # the slow steps still finish
        conn.close()
    finally:
        s.stop()
