"""GPU time per rank and step (decode step, or a program's own steps): compute, exposed communication and idle time (analysis/gpu_time.py), the
figures that say why a tensor-parallel step got faster or did not. One entry per rank (or the run's one process);
null for runs with no kernels in their decode steps."""

from __future__ import annotations

import numpy as np

from roseprof.analysis.gpu_time import step_time
from roseprof.analysis.sections.base import Context, Section, SectionResult
from roseprof.analysis.sections.collectives import run_participants
from roseprof.analysis.sections.steps import step_names
from roseprof.run.checks import NUM

FIGURES = ("period", "compute", "exposed", "idle")  # the diff compares these per rank


def compute(ctx: Context) -> SectionResult:
    trace = ctx.trace
    if not trace.has_gpu:
        return SectionResult({"gpu_time": None})
    shared = ctx.table("rank_collectives")
    if shared is not None:
        parts, inst, _ = shared
        op_group = ctx.table("op_rank")
    else:
        parts, op_group, _ = run_participants(ctx)
        inst = None
    collective = np.zeros(len(trace.ops), dtype=bool)
    if inst is not None and inst.kind == "gpu":
        collective[inst.source] = True
    ranks = []
    for p in range(len(parts.label)):
        figures = step_time(trace, op_group == p, collective, parts.step_start[p], parts.step_end[p])
        if figures is not None:
            ranks.append({"rank": parts.rank[p], "pid": parts.pid[p], **figures})
    if not ranks:
        return SectionResult({"gpu_time": None})
    _, kind = step_names(ctx)
    unit = {"decode": "decode step", "profiler": "ProfilerStep"}.get(kind, "step")
    return SectionResult({"gpu_time": {"unit": unit, "rank_known": parts.rank_known, "ranks": ranks}})


def diff_metrics(before, after) -> list[dict]:
    """Per rank present on both sides: the GPU's step time, compute, exposed communication and idle time per decode
    step, p50 (`rank R.gpu_idle_ms`, ...); a side's figure is the mean over its runs. TP=1 against TP=4 compares
    rank 0's, which every run has."""
    a_runs = [r.summary.get("gpu_time") for r in before]
    b_runs = [r.summary.get("gpu_time") for r in after]
    if not a_runs or not b_runs or not all(a_runs) or not all(b_runs):
        return []
    common = set.intersection(*({e["rank"] for e in g["ranks"]} for g in a_runs + b_runs))

    def side(runs, rank: int, key: str) -> float:
        return float(np.mean([next(e[key] for e in g["ranks"] if e["rank"] == rank) for g in runs])) / 1e6

    out = []
    for rank in sorted(common):
        for fig in FIGURES:
            key = f"{fig}_p50_ns"
            label = "gpu_step_ms" if fig == "period" else f"gpu_{fig}_ms"
            out.append(
                {"name": f"rank {rank}.{label}", "a": side(a_runs, rank, key), "b": side(b_runs, rank, key)}
            )
    return out


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f}"


def panels(summary: dict) -> list[dict]:
    g = summary.get("gpu_time")
    if not g:
        return []
    rows = [
        [e["rank"], _ms(e["period_p50_ns"]), _ms(e["compute_p50_ns"]), _ms(e["exposed_p50_ns"]),
         _ms(e["idle_p50_ns"]), f"{100.0 * e['busy_p50_ns'] / max(e['period_p50_ns'], 1):.0f}"]
        for e in g["ranks"]
    ]  # fmt: skip
    first = g["ranks"][0]
    note = (
        f"{'rank ' + str(first['rank']) if len(g['ranks']) > 1 else 'the GPU'}: of a "
        f"{_ms(first['period_p50_ns'])} ms step, compute {_ms(first['compute_p50_ns'])} ms, communication with no "
        f"compute beside it {_ms(first['exposed_p50_ns'])} ms, idle {_ms(first['idle_p50_ns'])} ms (no kernel "
        f"running: waiting for the host's launches or another rank); p50 over {first['steps']} steps"
    )
    if first.get("gap_p50_ns") is not None:  # (runs imported before 2026-12-04 have no gap)
        note += (
            f". Between steps (a step's last kernel to the next one's first): {_ms(first['gap_p50_ns'])} ms"
        )
        if first.get("gap_copy_steps"):
            note += (
                f"; in {first['gap_copy_steps']} of {first['steps']} a copy (memcpy or memset) started there on "
                "the stream of the next step's first kernel, which waited for it"
            )
    return [
        {
            "title": f"GPU time per {g.get('unit', 'step')}, per rank (ms, p50)",
            "columns": [
                "rank" if g["rank_known"] else "proc",
                "step",
                "compute",
                "exposed comm",
                "idle",
                "busy %",
            ],
            "rows": rows,
            "note": note,
        }
    ]


ENTRY = {
    "rank": int,
    "pid": int,
    "steps": int,
    "period_p50_ns": NUM,
    "busy_p50_ns": NUM,
    "compute_p50_ns": NUM,
    "exposed_p50_ns": NUM,
    "outside_p50_ns": (NUM, None),  # absent before 2026-11-28's runs
    "idle_p50_ns": NUM,
    "gap_p50_ns": (NUM, None),  # absent before 2026-12-04's runs
    "gap_copy_steps": (int, None),
}
CHECKS = {"gpu_time": ({"unit": str, "rank_known": bool, "ranks": [ENTRY]}, None)}

SECTION = Section(
    "gpu_time",
    compute,
    absent={"gpu_time": None},
    checks=CHECKS,
    diff_metrics=diff_metrics,
    panels=panels,
)
