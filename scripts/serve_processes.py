"""The two sides scripts/bench_serve.py compares, each a process of its own: a `roseinfer serve` (the engine flags
both sides get, its own /metrics step times) and the offline engine (`python -m roseinfer.benchmark_scheduler`)."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class Server:
    def __init__(
        self, args, port: int, metrics: bool, code: Path = REPO, flags: list[str] | None = None
    ) -> None:
        cmd = [sys.executable, "-m", "roseinfer.serve", args.model, "--port", str(port), *engine_flags(args)]
        if not metrics:
            cmd.append("--no-metrics")
        cmd += args.server_flag if flags is None else flags
        env = {**os.environ, "PYTHONPATH": str(code) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        self.port = port
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.ready = threading.Event()
        self.err: list[str] = []
        threading.Thread(target=self._watch, daemon=True).start()
        threading.Thread(target=lambda: self.err.extend(self.proc.stderr), daemon=True).start()

    def _watch(self) -> None:
        for line in self.proc.stdout:
            if "ready at" in line:
                self.ready.set()

    def wait_ready(self, timeout_s: float = 600) -> None:
        deadline = time.monotonic() + timeout_s
        while not self.ready.wait(0.5):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"bench_serve: the server did not start: {''.join(self.err)[-2000:]}")

    def step_seconds(self) -> tuple[float, float] | None:
        """(sum, count) of the engine's step times so far, from the server's own /metrics (None without)."""
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=30) as resp:
                text = resp.read().decode()
        except OSError:
            return None
        values = {}
        for line in text.splitlines():
            for key in ("decode_step_seconds_sum", "decode_step_seconds_count"):
                if line.startswith(f"roseinfer:{key}"):
                    values[key] = float(line.rsplit(" ", 1)[1])
        if "decode_step_seconds_count" not in values:
            return None
        return values["decode_step_seconds_sum"], values["decode_step_seconds_count"]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def engine_flags(args) -> list[str]:
    flags = ["--device", args.device, "--dtype", args.dtype, "--max-batch-size", str(args.max_batch_size)]
    if args.device.startswith("cuda"):
        flags += ["--paged-attn", "--cuda-graph"]
    return flags + args.engine_flag


def offline(args, streams: int, tokens: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "offline.json"
        cmd = [
            sys.executable, "-m", "roseinfer.benchmark_scheduler", "--hf-model-id", args.model, *engine_flags(args),
            "--prompt", "x", "--no-stop-on-eos", "--num-requests", str(streams), "--max-new-tokens", str(tokens),
            "--warmup-runs", "1", "--repeat-runs", str(args.repeats), "--json", str(out),
        ]  # fmt: skip
        env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise SystemExit(f"bench_serve: offline benchmark failed: {proc.stderr[-2000:]}")
        runs = json.loads(out.read_text())["runs"]
    med = lambda key: statistics.median(r[key] for r in runs)  # noqa: E731
    return {
        "tok_s": med("total_tok_s"),
        "tpot_ms": statistics.median(r["tpot_ms"]["50"] for r in runs),
        "decode_step_ms": statistics.median(1e3 * r["decode_s"] / max(r["decode_steps"], 1) for r in runs),
    }


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
