"""`roseinfer serve` started as a user starts it: a subprocess on a free loopback port, always torn down."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
START_TIMEOUT_S = 120  # importing torch and building the engine on a busy 2-core CI box


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServerProcess:
    def __init__(
        self,
        *args: str,
        env: dict[str, str] | None = None,
        model: str = "gpt2-tiny",
        prefix: tuple[str, ...] = (),
    ) -> None:
        """`prefix`: what the server runs under (e.g. `roseprof nsys ... --`), its argv before the server's."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # prepended, not replaced: the GPU machine's wheels reach Python through PYTHONPATH
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        child_env = {**os.environ, "PYTHONPATH": path, **(env or {})}
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "-m", "roseinfer.serve", model, "--port", str(self.port), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=child_env,
            cwd=REPO,
        )
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self._ready = threading.Event()
        threading.Thread(target=self._read, args=(self.proc.stdout, self.stdout, True), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, self.stderr, False), daemon=True).start()

    def _read(self, stream, into: list[str], watch_ready: bool) -> None:
        for line in stream:
            into.append(line)
            if watch_ready and "ready at" in line:
                self._ready.set()

    def wait_ready(self) -> ServerProcess:
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._ready.wait(0.2):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise AssertionError(f"server did not start: {''.join(self.stderr)[-2000:]}")
        return self

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 60) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)

    # -- small HTTP helpers (urllib: no client library between the test and the bytes) --------------------------
    def request(self, method: str, path: str, body=None, headers: dict | None = None, timeout: float = 60):
        """(status, headers, parsed JSON body or raw text)."""
        data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                status, hdrs, raw = resp.status, dict(resp.headers), resp.read()
        except urllib.error.HTTPError as e:
            status, hdrs, raw = e.code, dict(e.headers), e.read()
        text = raw.decode()
        try:
            return status, hdrs, json.loads(text)
        except json.JSONDecodeError:
            return status, hdrs, text

    def post(self, path: str, body, **kw):
        return self.request("POST", path, body, **kw)

    def get(self, path: str, **kw):
        return self.request("GET", path, **kw)

    def metric(self, name: str, headers: dict | None = None) -> float:
        """The value of one unlabelled-but-model_name sample of /metrics."""
        status, _, text = self.get("/metrics", headers=headers)
        assert status == 200
        for line in text.splitlines():
            if line.startswith(name + "{") or line.startswith(name + " "):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(f"{name} not in /metrics")


def sse_events(lines) -> list:
    """The `data:` payloads of a Server-Sent Events body (JSON decoded, '[DONE]' kept as a string)."""
    out = []
    for line in lines:
        line = line.decode() if isinstance(line, bytes) else line
        if line.startswith("data: "):
            payload = line[len("data: ") :].strip()
            out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


@pytest.fixture(scope="package")
def steplog_path(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("serve") / "steps.jsonl"


CHAT_TEMPLATE = "{% for m in messages %}{{ m.role }}: {{ m.content }}\n{% endfor %}{% if add_generation_prompt %}assistant:{% endif %}"


@pytest.fixture(scope="package")
def server(steplog_path):
    """One gpt2-tiny server the read-mostly tests share (with a step log, for the request-id join, and a chat
    template)."""
    template = steplog_path.parent / "chat.jinja"
    template.write_text(CHAT_TEMPLATE)
    s = ServerProcess(
        "--max-batch-size",
        "8",
        "--chat-template",
        str(template),
        env={"ROSEINFER_STEP_LOG": str(steplog_path)},
    ).wait_ready()
    yield s
    s.stop()
