"""What a torch capture window costs a serving engine (issue 49): `roseprof live --tool torch` against a running
`roseinfer serve --enable-profiling`, at a closed-loop concurrency (64 streams by default), for each window
length; from each stored run: the window's own account of the engine loop's pause (profiler start and stop and the
flight recorder's dump on the loop, the export off it and the longest loop step while it ran), and from the
client's tokens the gap the streams saw at the window's close and the TTFT of the requests sent just after the
window closed against those sent before it opened (SGLang users reported 65% higher TTFT after an export).

    python scripts/bench_profile_window.py http://127.0.0.1:8765 --steps 32,128 --concurrency 64 \
        --requests 1024 --output-len 256 --traces-dir /tmp/gpu-out/windows/traces

Prints one table row per window length and writes the figures as JSON (--json).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

AFTER_S = 2.0  # requests sent within this many seconds after the window closed are "after"


def run_window(url: str, steps: int, args) -> Path:
    name = f"window-{steps}"
    cmd = [sys.executable, "-m", "roseprof", "live", url, "--steps", str(steps), "--tool", "torch",
           "--concurrency", str(args.concurrency), "--requests", str(args.requests), "--prompt-len", "32",
           "--output-len", str(args.output_len), "--warmup", str(args.warmup), "--traces-dir", args.traces_dir,
           "--name", name]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"bench_profile_window: {' '.join(cmd)} failed: {proc.stderr.strip()[-500:]}")
    runs = sorted(
        p for p in Path(args.traces_dir).iterdir() if p.name.endswith(name) or f"-{name}-" in p.name
    )
    return runs[-1]


def figures(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    tokens = json.loads((folder / "load_tokens.json").read_text())
    capture = summary["live"]["capture"]
    first, last = capture["first_step"], capture["first_step"] + capture["steps"] - 1
    # client times (ms after the load's start) of the first token of the window's first step and of the step
    # after its last: when the window opened and closed, as the client saw it
    at = {}
    gaps_at_close = []
    for row in tokens:
        for i, (t, step) in enumerate(zip(row["t_ms"], row["steps"])):
            if step in (first, last + 1):
                at[step] = min(at.get(step, t), t)
            if i and step in (last, last + 1):
                gaps_at_close.append(t - row["t_ms"][i - 1])
    opened, closed = at.get(first), at.get(last + 1)
    ttft = [
        (r["sent_ms"], r["t_ms"][0] - r["sent_ms"]) for r in tokens if r["t_ms"] and r["sent_ms"] is not None
    ]
    before = [v for s, v in ttft if opened is not None and s < opened]
    after = [v for s, v in ttft if closed is not None and closed <= s < closed + AFTER_S * 1e3]
    itl = np.concatenate([np.diff(r["t_ms"]) for r in tokens if len(r["t_ms"]) > 1])

    def p(values, q):
        return float(np.percentile(values, q)) if len(values) else None

    return {
        "run": folder.name,
        "steps": capture["steps"],
        "stopped_early": capture["stopped_early"],
        "pause": capture["pause"],
        "itl_p50_ms": p(itl, 50),
        "worst_gap_at_close_ms": max(gaps_at_close) if gaps_at_close else None,
        "ttft_before": {"n": len(before), "p50_ms": p(before, 50), "p99_ms": p(before, 99)},
        "ttft_after": {"n": len(after), "p50_ms": p(after, 50), "p99_ms": p(after, 99)},
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("url")
    ap.add_argument("--steps", default="32,128", help="window lengths in decode steps, comma-separated")
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--requests", type=int, default=1024)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--warmup", type=float, default=3.0, help="seconds of load before the window opens")
    ap.add_argument("--traces-dir", required=True)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = [figures(run_window(args.url, int(n), args)) for n in args.steps.split(",")]

    def ms(v) -> str:
        return "-" if v is None else f"{v:.1f}"

    print(
        f"{'steps':>5} {'start':>6} {'stop':>7} {'dump':>5} {'export':>7} {'step p50':>8} {'longest':>8} "
        f"{'gap@close':>9} {'ITL p50':>7} {'TTFT p50 before/after':>22} {'TTFT p99 before/after':>22}  (ms)"
    )
    for r in rows:
        pz, b, a = r["pause"], r["ttft_before"], r["ttft_after"]
        print(
            f"{r['steps']:>5} {ms(pz.get('start_ms')):>6} {ms(pz.get('stop_ms')):>7} {ms(pz.get('dump_ms')):>5} "
            f"{ms(pz.get('export_ms')):>7} {ms(pz.get('median_step_ms')):>8} "
            f"{ms(pz.get('longest_step_during_export_ms')):>8} {ms(r['worst_gap_at_close_ms']):>9} "
            f"{ms(r['itl_p50_ms']):>7} {ms(b['p50_ms']) + ' / ' + ms(a['p50_ms']):>22} "
            f"{ms(b['p99_ms']) + ' / ' + ms(a['p99_ms']):>22}  n={b['n']}/{a['n']}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
