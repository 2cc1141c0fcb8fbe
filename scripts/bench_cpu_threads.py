"""The CPU engine's step time quiet and with competing CPU-bound processes, per intra-op thread count (issue 21).

    python scripts/bench_cpu_threads.py [--threads 1,2] [--load 2] [--rounds 2] [--max-new-tokens 128]

Runs roseprof's default CPU benchmark command (roseprof.workload.roseinfer.default_command("cpu"), with fewer new
tokens so the collapsed configurations finish) with `--cpu-threads T`, once quiet and once while `--load`
busy-looping processes run (started and stopped here, each bounded by `timeout`), rounds interleaved so drift
hits every configuration alike. Prints the ITL p50 (one decode step: every request is in every step) of each
configuration, and the loaded/quiet ratio. "Quiet" means no load from this script: the machine's own load
average is printed beside each run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from roseprof.workload.roseinfer import default_command


def _command(threads: int, new_tokens: int, out: str) -> list[str]:
    cmd = default_command("cpu")
    at = cmd.index("--max-new-tokens")
    cmd[at + 1] = str(new_tokens)
    return [*cmd, "--cpu-threads", str(threads), "--json", out]


def _start_load(n: int, seconds: int) -> list[subprocess.Popen]:
    spin = "while True: pass"
    return [subprocess.Popen(["timeout", str(seconds), sys.executable, "-c", spin]) for _ in range(n)]


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        p.wait(timeout=30)


def run_one(threads: int, load: int, new_tokens: int) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "result.json")
        env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
        procs = _start_load(load, 900) if load else []
        try:
            time.sleep(0.5 if load else 0)  # the spinners are running before the engine starts
            subprocess.run(_command(threads, new_tokens, out), env=env, check=True, capture_output=True)
        finally:
            _stop(procs)
        with open(out, encoding="utf-8") as fh:
            run = json.load(fh)["runs"][0]
    return float(run["itl_ms"]["50"])  # JSON keys are strings


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--load", type=int, default=2, help="competing CPU-bound processes in the loaded runs")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    args = ap.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    print(f"cores {os.cpu_count()}, command: {' '.join(_command(threads[0], args.max_new_tokens, 'OUT'))}")
    itl: dict[tuple[int, int], list[float]] = {}
    for r in range(args.rounds):
        for t in threads:
            for load in (0, args.load):
                ms = run_one(t, load, args.max_new_tokens)
                itl.setdefault((t, load), []).append(ms)
                print(
                    f"round {r + 1} threads {t} load {load}: ITL p50 {ms:.2f} ms "
                    f"(load average {os.getloadavg()[0]:.1f})",
                    flush=True,
                )
    print("\n| threads | quiet ITL p50 (ms) | loaded ITL p50 (ms) | loaded / quiet |")
    print("|---|---|---|---|")
    for t in threads:
        quiet = float(np.median(itl[(t, 0)]))
        loaded = float(np.median(itl[(t, args.load)]))
        print(f"| {t} | {quiet:.2f} | {loaded:.2f} | {loaded / quiet:.2f}x |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
