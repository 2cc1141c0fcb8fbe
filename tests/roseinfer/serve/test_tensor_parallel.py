"""`roseinfer serve --tensor-parallel-size 2` on CPU (gloo): every rank runs the server's adds and aborts in the
same steps, outputs equal one device's, and SIGTERM leaves no rank process behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor

from roseinfer import LLM, SamplingParams
from tests.roseinfer.serve.conftest import ServerProcess

PROMPTS = ["tensor", "parallel", [5, 6, 7, 8]]


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _cut(port: int) -> None:
    body = json.dumps({"prompt": "cut me", "max_tokens": 200, "ignore_eos": True, "stream": True}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(
            b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        seen = b""
        while seen.count(b"data: ") < 3 and (chunk := sock.recv(4096)):
            seen += chunk


def _schedule(path) -> list:
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return [(r["type"], r.get("requests")) for r in records if r["type"] in ("step", "prefill")]


def test_tensor_parallel_server_matches_one_device_and_leaves_no_rank(tmp_path):
    params = SamplingParams(max_new_tokens=20, ignore_eos=True)
    with LLM("gpt2-tiny") as llm:
        expected = [o.token_ids for o in llm.generate(PROMPTS, params)]
    log = tmp_path / "steps.jsonl"
    s = ServerProcess("--tensor-parallel-size", "2", "--device", "cpu", env={"ROSEINFER_STEP_LOG": str(log)})
    s.wait_ready()
    try:
        ranks = _children(s.proc.pid)
        assert ranks, "no rank process was started"

        def complete(prompt):
            body = {"prompt": prompt, "max_tokens": 20, "temperature": 0, "ignore_eos": True}
            return s.post("/v1/completions", body)[2]["choices"][0]["token_ids"]

        with ThreadPoolExecutor(6) as pool:  # completions and cut streams (aborts) in the same steps
            cuts = [pool.submit(_cut, s.port) for _ in range(3)]
            got = list(pool.map(complete, PROMPTS))
            for c in cuts:
                c.result()
        assert got == expected
        deadline = time.monotonic() + 60
        while s.metric("roseinfer:num_requests_running") and time.monotonic() < deadline:
            time.sleep(0.2)
        assert s.metric("roseinfer:kv_cache_usage_perc") == 0
        s.signal(signal.SIGTERM)
        assert s.wait(120) == 0
        deadline = time.monotonic() + 30
        while any(_alive(pid) for pid in ranks) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not any(_alive(pid) for pid in ranks)
        # Every rank ran the same schedule: the same prefills and steps with the same requests.
        assert _schedule(log) == _schedule(tmp_path / "steps.rank1.jsonl")
    finally:
        s.stop()
