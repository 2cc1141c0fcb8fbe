"""What a capture window costs each rank's loop on a running `roseinfer serve --enable-profiling` (tensor-parallel
or not): K windows of N decode steps opened over HTTP while threads of this script keep S streams busy, and per
window and rank the server's own account (GET /profile/status: profiler start and stop and the recorder's dump on
the rank's loop, its export off it) beside rank 0's median step in the window.

    python scripts/bench_tp_window.py http://127.0.0.1:8765 --tool torch --steps 16 --windows 5 --streams 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
import urllib.request


def call(url: str, method: str, route: str, body: dict | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(url + route, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=300) as resp:
        return json.loads(resp.read())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("url")
    ap.add_argument("--tool", default="torch", choices=("steps", "torch"))
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--windows", type=int, default=5)
    ap.add_argument("--streams", type=int, default=4)
    args = ap.parse_args()
    done = threading.Event()

    def stream() -> None:
        while not done.is_set():
            call(args.url, "POST", "/v1/completions", {"prompt": "x", "max_tokens": 64, "ignore_eos": True})

    threads = [threading.Thread(target=stream, daemon=True) for _ in range(args.streams)]
    for t in threads:
        t.start()
    rows: dict[int, list[dict]] = {}
    median_step = []
    try:
        time.sleep(2.0)  # the streams admitted
        for _ in range(args.windows):
            call(args.url, "POST", "/profile/start", {"tool": args.tool, "steps": args.steps})
            while (w := call(args.url, "GET", "/profile/status")["window"])["state"] not in (
                "done",
                "failed",
            ):
                time.sleep(0.1)
            if w["state"] == "failed":
                raise SystemExit(f"bench_tp_window: window {w['id']} failed: {w['error']}")
            median_step.append(w["pause"]["median_step_ms"])
            for r in w.get("ranks") or [{"rank": 0, **w}]:
                rows.setdefault(r["rank"], []).append(r["pause"])
    finally:
        done.set()
    print(
        f"{args.windows} {args.tool} windows of {args.steps} steps, {args.streams} streams; medians over windows, ms"
    )
    print(f"rank 0's median step in the window: {statistics.median(median_step):.1f}")
    print(f"{'rank':>4} {'start':>8} {'stop':>8} {'dump':>8} {'export':>8}   stop per window")
    for rank, pauses in sorted(rows.items()):
        med = {
            k: statistics.median(p[k] for p in pauses)
            for k in ("start_ms", "stop_ms", "dump_ms", "export_ms")
        }
        each = " ".join(f"{p['stop_ms']:.0f}" for p in pauses)
        print(f"{rank:>4} {med['start_ms']:>8.1f} {med['stop_ms']:>8.1f} {med['dump_ms']:>8.2f} "
              f"{med['export_ms']:>8.1f}   {each}")  # fmt: skip


if __name__ == "__main__":
    main()
