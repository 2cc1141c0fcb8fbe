"""Per-request overhead of the HTTP stack `roseinfer serve` runs on: FastAPI vs bare Starlette, both on uvicorn.

    python scripts/bench_http_stack.py [--requests 2000] [--rounds 3]

Each app parses the same completions body into the server's own pydantic model (roseinfer.serve.protocol) and
answers a small JSON object, with no engine behind it; FastAPI validates through its dependency machinery, the
Starlette app calls the model itself. One keep-alive client sends requests one after another; the figure is the
median round trip, interleaved over rounds (the apps take turns).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

APPS = {
    "fastapi": """
from fastapi import FastAPI
from roseinfer.serve.protocol import CompletionRequest
app = FastAPI()
@app.post("/v1/completions")
async def completions(body: CompletionRequest):
    return {"id": "x", "choices": [{"text": "", "index": 0}], "n": len(body.prompts())}
""",
    "starlette": """
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route
from roseinfer.serve.protocol import CompletionRequest
async def completions(request):
    body = CompletionRequest.model_validate(await request.json())
    return JSONResponse({"id": "x", "choices": [{"text": "", "index": 0}], "n": len(body.prompts())})
app = Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])
""",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(name: str, port: int) -> subprocess.Popen:
    code = (
        APPS[name]
        + f"\nimport uvicorn\nuvicorn.run(app, port={port}, log_level='warning', access_log=False)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", code], env=env)


def wait_port(port: int) -> None:
    for _ in range(600):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"no server on {port}")


def round_trips(port: int, n: int) -> list[float]:
    body = json.dumps({"prompt": "x", "max_tokens": 16, "temperature": 0}).encode()
    request = (
        b"POST /v1/completions HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (len(body), body)
    )
    times = []
    with socket.create_connection(("127.0.0.1", port)) as sock:
        reader = sock.makefile("rb")
        for _ in range(n):
            t0 = time.perf_counter()
            sock.sendall(request)
            status = reader.readline()
            assert b" 200 " in status, status
            length = 0
            while (line := reader.readline()) != b"\r\n":
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":")[1])
            reader.read(length)
            times.append(time.perf_counter() - t0)
    return times


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    ports = {name: free_port() for name in APPS}
    procs = {name: start(name, port) for name, port in ports.items()}
    medians: dict[str, list[float]] = {name: [] for name in APPS}
    try:
        for port in ports.values():
            wait_port(port)
            round_trips(port, 200)  # warm-up
        for _ in range(args.rounds):
            for name, port in ports.items():
                medians[name].append(statistics.median(round_trips(port, args.requests)) * 1e6)
    finally:
        for proc in procs.values():
            proc.terminate()
            proc.wait(30)
    for name, values in medians.items():
        print(f"{name:10s} median round trip (us): {statistics.median(values):.0f}  per round: "
              f"{', '.join(f'{v:.0f}' for v in values)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
