"""Clients that misbehave at the socket level: cut streams, malformed bytes, oversized requests, idle crowds."""

from __future__ import annotations

import json
import random
import socket
import time
from concurrent.futures import ThreadPoolExecutor

from tests.roseinfer.serve.conftest import ServerProcess


def _raw(server: ServerProcess, data: bytes, read: bool = True) -> bytes:
    """Send `data` and read the answer. A server that answers before reading all of a refused body (413) and closes
    resets the connection: the send stops there, and what was answered before the reset is the answer."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=30) as sock:
        try:
            sock.sendall(data)
            if not read:
                return b""
            sock.shutdown(socket.SHUT_WR)
        except (ConnectionResetError, BrokenPipeError):
            if not read:
                return b""
        chunks = []
        try:
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except ConnectionResetError:
            pass
        return b"".join(chunks)


def _post_bytes(body: bytes, extra_headers: str = "") -> bytes:
    head = (
        "POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n{extra_headers}Connection: close\r\n\r\n"
    )
    return head.encode() + body


def _status(response: bytes) -> int:
    return int(response.split(b" ", 2)[1])


def _finished_counts(server: ServerProcess) -> dict[str, float]:
    _, _, text = server.get("/metrics")
    out = {}
    for line in text.splitlines():
        if line.startswith("roseinfer:request_success_total{"):
            reason = line.split('finished_reason="')[1].split('"')[0]
            out[reason] = float(line.rsplit(" ", 1)[1])
    return out


def _cut_stream(port: int, max_tokens: int, events_before_cut: int) -> None:
    body = json.dumps(
        {"prompt": "cut", "max_tokens": max_tokens, "ignore_eos": True, "stream": True}
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(_post_bytes(body))
        seen = b""
        while seen.count(b"data: ") < events_before_cut:
            chunk = sock.recv(4096)
            if not chunk:
                break
            seen += chunk
    # closed here, mid-stream (or before the first event, with events_before_cut 0)


def test_cut_streams_leave_no_kv_blocks_in_use(server):
    before = _finished_counts(server)
    rng = random.Random(47)
    cuts = [(rng.randint(100, 400), rng.randint(0, 12)) for _ in range(100)]
    with ThreadPoolExecutor(max_workers=25) as pool:
        list(pool.map(lambda c: _cut_stream(server.port, *c), cuts))
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if (
            server.metric("roseinfer:num_requests_running") == 0
            and server.metric("roseinfer:num_requests_waiting") == 0
        ):
            break
        time.sleep(0.2)
    assert server.metric("roseinfer:num_requests_running") == 0
    assert server.metric("roseinfer:num_requests_waiting") == 0
    assert server.metric("roseinfer:kv_cache_usage_perc") == 0
    after = _finished_counts(server)
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    assert sum(delta.values()) == 100  # every stream left the engine, by its end or by the cut
    assert delta["abort"] > 0
    assert server.get("/health")[0] == 200


def test_malformed_bytes_get_4xx_and_the_server_lives_on(server):
    assert _status(_raw(server, b"HELLO THERE\r\n\r\n")) == 400
    assert _status(_raw(server, b"GET /health HTTP/1.1\r\nNo colon here\r\n\r\n")) == 400
    # A body shorter than its Content-Length, then the client goes away.
    _raw(server, _post_bytes(b'{"prompt": "x"}')[:-5], read=False)
    # Not JSON, not UTF-8.
    response = _raw(server, _post_bytes(b"\x00\xff{{"))
    assert _status(response) == 400
    assert json.loads(response.split(b"\r\n\r\n", 1)[1])["error"]["type"] == "invalid_request_error"
    assert server.get("/health")[0] == 200


def test_oversized_body_and_too_many_headers(server):
    # The answer comes before the body is sent (the server refuses it by its Content-Length).
    big = _raw(
        server, _post_bytes(b'{"prompt": "' + b"x" * (2 << 20) + b'"}').split(b"\r\n\r\n")[0] + b"\r\n\r\n"
    )
    assert _status(big) == 413
    assert "error" in json.loads(big.split(b"\r\n\r\n", 1)[1])
    chunked = (
        b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
        b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        + b"".join(b"%x\r\n%s\r\n" % (65536, b"x" * 65536) for _ in range(17))
    )  # 1.06 MiB of a chunked body, past the 1 MiB limit: the server answers without reading more
    assert _status(_raw(server, chunked)) == 413
    many = "".join(f"X-H{i}: v\r\n" for i in range(200))
    assert _status(_raw(server, _post_bytes(b'{"prompt": "x"}', many))) == 431
    huge = f"X-Big: {'v' * 20000}\r\n"
    # Past h11's 16 KiB for the request head uvicorn closes the connection (or answers 4xx); never a 200 or 500.
    response = _raw(server, _post_bytes(b'{"prompt": "x"}', huge))
    assert response == b"" or 400 <= _status(response) < 500
    assert server.get("/health")[0] == 200


def test_a_thousand_idle_connections_do_not_stop_other_clients(server):
    idle = []
    try:
        for i in range(1000):
            sock = socket.create_connection(("127.0.0.1", server.port), timeout=30)
            # Half send nothing; half send part of a request's headers and stall (slowloris).
            if i % 2:
                sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nX-Slow: ")
            idle.append(sock)
        status, _, body = server.post("/v1/completions", {"prompt": "x", "max_tokens": 4}, timeout=60)
        assert status == 200 and body["usage"]["completion_tokens"] == 4
        assert server.get("/health")[0] == 200
    finally:
        for sock in idle:
            sock.close()
