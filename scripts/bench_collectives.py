"""How the collectives section scales: the TP=2 slow-rank capture's ranges repeated K times end to end (K times the
decode steps and all-reduces of both ranks, the same nesting), analysed with both ranks' step logs' ranks, timed.

Usage: python scripts/bench_collectives.py [K ...]        (default: 1 10 40)
Prints one JSON line per K: ranges, collectives, matched, analyse seconds (all sections) and the collectives
section's own seconds, and the straggler it names (it must stay rank 1 in roseinfer.layer.mlp at every K).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

from roseprof.analysis.ranks import assign_ranks
from roseprof.analysis.sections import SECTIONS, Context
from roseprof.drivers.nsys.reader import read_nsys_sqlite
from roseprof.model import Ranges
from roseprof.workload.steplog import read_steplog

BASE = (
    Path(__file__).resolve().parent.parent
    / "tests"
    / "data"
    / "nsys"
    / "cpu-nsys2022.4-roseinfer-tp2-slowrank1"
)
COLUMNS = ("start", "end", "name", "domain", "tid", "style")


def tiled(k: int):
    """The capture with its ranges repeated k times, each copy after the last (the steps then number 0..k*63-1)."""
    trace = read_nsys_sqlite(f"{BASE}.sqlite", label=BASE.name)
    r = trace.ranges
    span = int(r.end.max() - r.start.min()) + 1
    shift = {c: c in ("start", "end") for c in COLUMNS}
    trace.ranges = Ranges(
        **{
            c: np.concatenate([getattr(r, c) + (i * span if shift[c] else 0) for i in range(k)])
            for c in COLUMNS
        }
    ).sort()
    logs = {0: read_steplog(f"{BASE}.steplog.jsonl"), 1: read_steplog(f"{BASE}.steplog.rank1.jsonl")}
    assign_ranks(
        trace, logs
    )  # the ranks by the logs' pids; the steps are numbered per rank (no log per copy)
    return trace


def main(ks: list[int]) -> None:
    for k in ks:
        trace = tiled(k)
        ctx = Context(trace, None)
        t0 = time.perf_counter()
        for section in SECTIONS:
            if section.name == "collectives":
                t1 = time.perf_counter()
            if section.applies(trace):
                ctx.results[section.name] = section.compute(ctx)
        t2 = time.perf_counter()
        c = ctx.results["collectives"].summary["collectives"]
        s = c["straggler"]
        print(
            json.dumps(
                {
                    "k": k,
                    "ranges": len(trace.ranges),
                    "collectives": c["count"],
                    "matched": c["matched"],
                    "analyse_s": round(t2 - t0, 2),
                    "collectives_s": round(t2 - t1, 2),
                    "straggler": [s["rank"], s["region"], s["windows"]],
                }
            )
        )


if __name__ == "__main__":
    main([int(a) for a in sys.argv[1:]] or [1, 10, 40])
