"""The gate across runs without a profiler: same-code groups compared on what the engine's step log alone gives
(decode-step times and ITL: the default gate's metrics). No nsys, so no shared lock; the region metrics need
traces (scripts/gate_noise.sh).

    python scripts/gate_noise_steplog.py OUT [--pairs 10] [--runs 3] [--threshold 10]

Runs the CPU engine benchmark pairs x 2 x runs times (one torch thread; step logs kept in OUT, reused when
there), then for each pair: group A against group B (hierarchical bootstrap) and first run against first run
(the single-run method), with the default gate at --threshold percent."""

import argparse
import os
import subprocess
import sys
from pathlib import Path

from roseprof.analysis.diff import compare, gate
from roseprof.analysis.samples import prepare
from roseprof.analysis.sections import SECTIONS
from roseprof.analysis.summary import analyse
from roseprof.model import Names, Tool, Trace
from roseprof.workload.steplog import read_steplog

BENCH = [
    sys.executable, "-m", "roseinfer.benchmark_streaming", "--hf-model-id", "gpt2-tiny", "--device", "cpu",
    "--num-requests", "16", "--max-batch-size", "16", "--max-new-tokens", "128", "--no-stop-on-eos",
    "--warmup-runs", "0", "--repeat-runs", "1",
]  # fmt: skip


def run_data(path: Path):
    trace = Trace(Tool("steplog", "0"), names=Names())
    summary, tables = analyse(trace, read_steplog(str(path)))
    return prepare(summary, {"regions": [], "rows": tables["steps"]}, tables["itl_series"], trace, SECTIONS)


def _named(m: dict) -> str:
    return f"{m['name']} {m['delta_pct']:+.1f}%"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--pairs", type=int, default=10)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--threshold", type=float, default=10.0)
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    for pair in range(1, args.pairs + 1):
        for side in "ab":
            for r in range(1, args.runs + 1):
                log = out / f"pair{pair}-{side}{r}.jsonl"
                if not log.is_file():
                    with open("/proc/loadavg") as fh:
                        load = fh.read().split()[:3]
                    print(f"run {log.name} load {' '.join(load)}", file=sys.stderr, flush=True)
                    part = log.with_suffix(".part")
                    part.unlink(missing_ok=True)
                    subprocess.run(BENCH, env={**env, "ROSEINFER_STEP_LOG": str(part)}, check=True,
                                   stdout=subprocess.DEVNULL)  # fmt: skip
                    part.rename(log)
    fired_groups = fired_first = 0
    for pair in range(1, args.pairs + 1):
        ga = [run_data(out / f"pair{pair}-a{r}.jsonl") for r in range(1, args.runs + 1)]
        gb = [run_data(out / f"pair{pair}-b{r}.jsonl") for r in range(1, args.runs + 1)]
        groups = gate(compare(ga, gb), args.threshold, None)
        first = gate(compare(ga[0], gb[0]), args.threshold, None)
        fired_groups += bool(groups)
        fired_first += bool(first)
        steps = compare(ga, gb)
        p50 = next(m for m in steps if m["name"] == "steps.p50_ns")
        print(
            f"pair {pair}: steps.p50 {p50['delta_pct']:+.1f}% [{p50['ci_low_pct']:+.1f}, {p50['ci_high_pct']:+.1f}]"
            f"  groups: {', '.join(m['name'] for m in groups) or '-'}"
            f"  first runs: {', '.join(_named(m) for m in first) or '-'}"
        )
    print(f"gate fired (default metrics, >{args.threshold:g}%): groups {fired_groups}/{args.pairs}, "
          f"first runs only {fired_first}/{args.pairs}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
