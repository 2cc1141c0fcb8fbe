"""Where a CUDA-graph decode step's GPU time goes, from a stored run: the GPU time of each step's graph replay
split by the region open when each kernel's graph node was captured, per normal and per rollover step, checked
against the step's GPU time counted directly from the trace (the two must agree: every replayed kernel has a
region). A kernel counts its own time on its stream (`roseprof.analysis.stream_time`): under programmatic
dependent launches a kernel starts while the one before runs, and the summed durations, printed last, count
that overlap twice.

    python scripts/graph_step_table.py traces/<run-id>

Prints a markdown table (docs/BENCHMARKS.md takes it as is).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from roseprof.analysis.stream_time import own_stream_ns
from roseprof.model import KERNEL
from roseprof.run import tables


def main(folder: Path) -> int:
    steps = (tables.read_steps(folder) or {}).get("rows")
    if not steps:
        print(f"{folder}: no decode steps")
        return 1
    cols = [c for c in steps if c.startswith("graph:")]
    if not cols:
        print(f"{folder}: no graph-replayed kernel was attributed to a capture-time region")
        return 1
    start = np.asarray(steps["start_ns"], dtype=np.int64)  # [S]
    end = start + np.asarray(steps["dur_ns"], dtype=np.int64)
    ops = tables.read_trace(folder).ops
    k = np.flatnonzero((ops.kind == KERNEL) & (ops.api_start >= 0))
    step = np.searchsorted(start, ops.api_start[k], side="right") - 1
    inside = (step >= 0) & (ops.api_start[k] <= end[np.maximum(step, 0)])
    own = own_stream_ns(ops)[k][inside]
    kernel = np.bincount(step[inside], weights=own, minlength=len(start))  # [S]
    summed = np.bincount(step[inside], weights=(ops.end - ops.start)[k][inside], minlength=len(start))  # [S]
    parts = {c[len("graph:") :]: np.asarray(steps[c], dtype=np.float64) for c in cols}
    total = sum(parts.values())  # [S]
    launched = kernel > 0  # a drain launches nothing
    roll = (np.asarray(steps["rollovers"]) > 0) & launched
    normal = ~roll & launched
    print(
        f"{int(launched.sum())} steps with a replay ({int(roll.sum())} starting blocks); "
        f"GPU us per step, mean over the steps"
    )
    print("| region at capture time | normal steps | share | rollover steps |")
    print("|---|---|---|---|")
    mean = lambda v, m: float(v[m].mean()) / 1e3 if m.any() else float("nan")  # noqa: E731
    for name, v in sorted(parts.items(), key=lambda kv: -kv[1][normal].sum()):
        share = 100 * v[normal].sum() / max(total[normal].sum(), 1)
        print(f"| `{name}` | {mean(v, normal):.1f} | {share:.1f}% | {mean(v, roll):.1f} |")
    print(f"| sum of the regions | {mean(total, normal):.1f} | | {mean(total, roll):.1f} |")
    print(
        f"| GPU time of the step (all kernels launched in it, each its own time on its stream) | {mean(kernel, normal):.1f} "
        f"| | {mean(kernel, roll):.1f} |"
    )
    print(f"| their durations summed | {mean(summed, normal):.1f} | | {mean(summed, roll):.1f} |")
    diff = np.abs(total - kernel)[launched].max()
    print(
        f"largest per-step difference between the two: {diff:.0f} ns ({'adds up' if diff == 0 else 'DOES NOT add up'})"
    )
    return 0 if diff == 0 else 1


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
