"""Collectives: per rank, every collective (NCCL/RCCL kernels on GPUs, the engine's all-reduce regions on the CPU),
per decode step and collective the ranks' arrival spread and the last rank, exposed communication per rank, the
straggler (how often last, by how much, in which region it spent the extra time) and the ITL spikes one rank
caused. The analyses are analysis/collectives.py and analysis/stragglers.py; this module assembles the summary,
its checks, diff metrics and panels."""

from __future__ import annotations

import numpy as np

from roseprof.analysis.collective_tables import by_order, by_region, heatmap, rank_rows, spread_stats
from roseprof.analysis.collectives import Participants, find_instances, match, participants
from roseprof.analysis.ranks import RankGroup
from roseprof.analysis.sections.base import Context, Section, SectionResult
from roseprof.analysis.sections.steps import step_names
from roseprof.analysis.stragglers import spikes_by_rank, straggler
from roseprof.run.checks import NUM, OPT_NUM

BY_ORDER_ROWS = 16  # the panel's rows of collectives by their place in the step (summary.json keeps them all)
SOURCE = {
    "gpu": "NCCL/RCCL kernels, or kernels of the all-reduce region",
    "cpu": "roseinfer.layer.allreduce regions (gloo: the host waits)",
}


def compute(ctx: Context) -> SectionResult:
    trace = ctx.trace
    # The ranks section found and matched them already for its clock check (a run of several ranks).
    shared = ctx.table("rank_collectives")
    if shared is not None:
        parts, inst, m = shared
    else:
        parts, op_group, range_group = run_participants(ctx)
        inst = find_instances(
            trace,
            ctx.tree,
            ctx.gpu.op_range,
            ctx.capture,
            op_group,
            range_group,
            parts,
            ctx.kernel_keys.names,
        )
        m = match(inst, len(parts.label)) if inst is not None else None
    if inst is None:
        return SectionResult({"collectives": None})
    if m.unmatched_steps:
        ctx.warnings.append(
            f"collectives: {m.unmatched_steps} decode step(s) where the ranks issued different numbers of "
            "collectives were left out of the arrival spread"
        )
    itl = ctx.results.get("itl")
    # Where the ranks' timings cannot be compared (ctx.doubts, said first), no rank is blamed: no straggler, no
    # spike one rank's lateness explains.
    spikes = late = None
    if not ctx.doubts:
        spikes = spikes_by_rank(
            ctx.table("itl_series"), itl.summary.get("spikes") if itl is not None else None, parts, m
        )
        late = straggler(trace, ctx.tree, inst, parts, m, _op_owner(ctx) if inst.kind == "gpu" else None)
    summary = {
        "kind": inst.kind,
        "source": SOURCE[inst.kind],
        "rank_known": parts.rank_known,
        "count": int(len(inst.who)),
        "matched": int(len(m.step)),
        "matched_steps": int(len(m.steps)),
        "unmatched_steps": m.unmatched_steps,
        "spread": spread_stats(m) if len(parts.label) > 1 else None,
        "ranks": rank_rows(inst, parts, m),
        "straggler": late,
        "spikes": spikes,
        "by_region": by_region(trace, inst),
        "by_order": by_order(trace, inst, parts, m),
        "heatmap": heatmap(parts, m),
    }
    return SectionResult({"collectives": summary})


def run_participants(ctx: Context) -> tuple[Participants, np.ndarray, np.ndarray]:
    """(the participants, [G] each GPU op's, [R] each range's): the `ranks` section's groups with each rank's
    steps joined to its own step log; a run of one process is one participant with the steps table's steps."""
    trace = ctx.trace
    groups = ctx.table("rank_groups") or []
    if groups:
        range_group = ctx.table("range_rank")
        return (
            rank_participants(ctx, groups, ctx.table("rank_steps") or {}, range_group),
            ctx.table("op_rank"),
            range_group,
        )
    pids = sorted(set(trace.thread_pids.values()))
    proc = trace.processes.get(pids[0]) if len(pids) == 1 else None
    one = RankGroup("", proc.rank if proc else None, pids[:1], None, None, "")
    rows = ctx.table("steps") or _own_steps(ctx, np.ones(len(trace.ranges), dtype=bool))
    return (
        participants([one], [rows]),
        np.zeros(len(trace.ops), dtype=np.int64),
        np.zeros(len(trace.ranges), dtype=np.int64),
    )


def rank_participants(
    ctx: Context, groups: list[RankGroup], rank_steps: dict, range_group: np.ndarray
) -> Participants:
    """The `ranks` section's groups as participants, each with its steps joined to its own step log (`rank_steps`,
    by label), or its decode-step ranges numbered 0, 1, ... where it has none. The ranks section's clock check calls
    it too, before its tables exist, so both pair the same collectives."""
    steps = [rank_steps.get(g.label) or _own_steps(ctx, range_group == i) for i, g in enumerate(groups)]
    return participants(groups, steps)


def _own_steps(ctx: Context, mine: np.ndarray) -> dict:
    """A participant's decode-step ranges numbered 0, 1, ... (where no step log names them)."""
    r = ctx.trace.ranges
    step_name, _ = step_names(ctx)
    step_id = ctx.trace.names.find(step_name) if step_name else -1
    rows = np.flatnonzero((r.name == step_id) & mine) if step_id >= 0 else np.zeros(0, dtype=np.int64)
    rows = rows[np.argsort(r.start[rows], kind="stable")]
    return {"start_ns": r.start[rows], "dur_ns": r.end[rows] - r.start[rows], "index": np.arange(len(rows))}


def _op_owner(ctx: Context) -> np.ndarray:
    """[G] names index of the region each GPU op ran for: its capture-time region (graph replay), else the
    innermost region that launched it; -1 for none (as the kernels section counts them)."""
    names = ctx.trace.ranges.name
    owner = np.where(ctx.capture >= 0, ctx.capture, ctx.gpu.op_range)
    return np.where(owner >= 0, names[np.maximum(owner, 0)], -1)


def diff_metrics(before, after) -> list[dict]:
    """Per rank: exposed communication per decode step, p50 (`rank R.exposed_ms`); overall: the arrival spread p50
    (`arrival_spread_p50_ms`). A side's figure is the mean over its runs; a rank that one side lacks is not
    compared. (Each rank's decode step p50 is the `ranks` section's metric.)"""
    a_runs = [r.summary.get("collectives") for r in before]
    b_runs = [r.summary.get("collectives") for r in after]
    if not a_runs or not b_runs or not all(a_runs) or not all(b_runs):
        return []

    def side(runs, pick) -> float | None:
        values = [pick(c) for c in runs]
        return float(np.mean(values)) / 1e6 if all(v is not None for v in values) else None

    def of_rank(rank: int, key: str):
        return lambda c: next((e[key] for e in c["ranks"] if e["rank"] == rank), None)

    pairs = []
    common = {e["rank"] for c in a_runs + b_runs for e in c["ranks"]}
    for c in a_runs + b_runs:
        common &= {e["rank"] for e in c["ranks"]}
    for rank in sorted(common):
        pairs.append((f"rank {rank}.exposed_ms", of_rank(rank, "exposed_per_step_p50_ns")))
    pairs.append(("arrival_spread_p50_ms", lambda c: (c.get("spread") or {}).get("p50_ns")))
    out = []
    for name, pick in pairs:
        a, b = side(a_runs, pick), side(b_runs, pick)
        if a is not None and b is not None:
            out.append({"name": name, "a": a, "b": b})
    return out


def _ms(ns) -> str:
    if ns is None:
        return "-"
    text = f"{ns / 1e6:.2f}"
    return "0.00" if text == "-0.00" else text


def panels(summary: dict) -> list[dict]:
    c = summary.get("collectives")
    if not c:
        return []
    who = "rank" if c["rank_known"] else "proc"
    rows = [
        [e["rank"], e["pid"], e["count"], _ms(e["exposed_per_step_p50_ns"]), _ms(e["step_p50_ns"]),
         e["last_count"], _ms(e["late_p50_ns"]), _ms(e["late_p99_ns"])]
        for e in c["ranks"]
    ]  # fmt: skip
    spread = c.get("spread")
    note = f"{c['count']} collectives ({c['source']}); "
    if spread:
        note += (
            f"{c['matched']} matched over {c['matched_steps']} decode steps: arrival spread p50 "
            f"{_ms(spread['p50_ns'])} ms, p99 {_ms(spread['p99_ns'])} ms, max {_ms(spread['max_ns'])} ms"
        )
    else:
        note += "one rank: no arrival spread"
    clock = summary.get("rank_clock") or {}
    how = clock.get("how") or ""
    if spread and how and not how.startswith("one host clock"):
        note += "; each rank on its own clock: a spread includes the clocks' disagreement"
        ends = clock.get("collectives") or {}
        if (
            ends.get("matched_by") == "step"
        ):  # the same collectives' ends: disagreement plus the link's latency
            note += f", {ends['end_spread_max_ns'] / 1e3:.1f} µs at most by the collectives' ends"
        note += " (rank_clock)"
    out = [
        {
            "title": "collectives per rank (exposed: per decode step, p50; late: arrival after the first rank)",
            "columns": [who, "pid", "coll", "exposed ms", "step ms", "last", "late p50", "late p99"],
            "rows": rows,
            "note": note + (" (ranks unknown: processes in pid order)" if not c["rank_known"] else ""),
        }
    ]
    s = c.get("straggler")
    if s:
        out.append(
            {
                "title": (
                    f"straggler: rank {s['rank']} (pid {s['pid']}), where it spent the extra time"
                    if s["clear"]
                    else f"no clear straggler; the latest rank: {s['rank']} (pid {s['pid']}), where its extra time went"
                ),
                "columns": ["region", "time", "extra ms", "p50 ms/coll"],
                "rows": [
                    [r["region"], r.get("kind", "host"), _ms(r["extra_ns"]), _ms(r["extra_p50_ns"])]
                    for r in s["regions"]
                ],
                "note": (
                    (f"most of it: {s['where']}; " if s.get("where") else "")
                    + f"last at {s['last_count']} of {c['matched']} collectives ({s['last_pct']:.0f}%), late p50 "
                    f"{_ms(s['late_p50_ns'])} ms, p99 {_ms(s['late_p99_ns'])} ms; {s['late_share_pct']:.0f}% of all "
                    f"lateness; most often late at collective {s['most_late_at']} of the step"
                    + (f" (issued in {s['most_late_site']})" if s.get("most_late_site") else "")
                ),
            }
        )
    if c.get("by_region"):
        rows = c["by_region"][:12]
        one_name = len({r["name"] for r in rows}) == 1  # the CPU's all-reduce region: said once, in the note
        out.append(
            {
                "title": "collectives by the region they were issued from (all ranks)",
                # The collective's own name last: NCCL's run long, and the figures must stay whole at 80 columns.
                "columns": ["region", "calls", "total ms", "exposed ms"]
                + ([] if one_name else ["collective"]),
                "rows": [
                    [r["region"] or "-", r["count"], _ms(r["total_ns"]), _ms(r["exposed_ns"])]
                    + ([] if one_name else [r["name"]])
                    for r in rows
                ],
                "note": f"collective: {rows[0]['name']}" if one_name else None,
            }
        )
    if c.get("by_order"):
        rows = c["by_order"]
        out.append(
            {
                "title": "arrival spread by collective of the decode step",
                "columns": ["n", "region", "spread p50", "p99", "last", "last %"],
                "rows": [
                    [
                        r["order"],
                        r["region"] or "-",
                        _ms(r["spread_p50_ns"]),
                        _ms(r["spread_p99_ns"]),
                        "-" if r["last_rank"] is None else r["last_rank"],
                        f"{r['last_pct']:.0f}",
                    ]
                    for r in rows[:BY_ORDER_ROWS]
                ],  # fmt: skip
                "note": (
                    f"{len(rows) - BY_ORDER_ROWS} more in summary.json" if len(rows) > BY_ORDER_ROWS else None
                ),
            }
        )
    sp = c.get("spikes")
    if sp and sp["explained_steps"]:
        out.append(
            {
                "title": "ITL spikes one rank's lateness explains",
                "columns": ["step", "ITL ms", "rank", "late ms"],
                "rows": [
                    [e["step"], f"{e['itl_ms']:.2f}", e["rank"], f"{e['late_ms']:.2f}"] for e in sp["listed"]
                ],
                "note": f"{sp['explained_steps']} of {sp['spike_steps']} spike steps",
            }
        )
    return out


RANK_ENTRY = {
    "rank": int,
    "pid": int,
    "count": int,
    "exposed_ns": NUM,
    "exposed_per_step_p50_ns": OPT_NUM,
    "step_p50_ns": OPT_NUM,
    "last_count": int,
    "late_p50_ns": OPT_NUM,
    "late_p99_ns": OPT_NUM,
}
CHECKS = {
    "collectives": (
        {
            "kind": str,
            "rank_known": bool,
            "count": int,
            "matched": int,
            "unmatched_steps": int,
            "spread": ({"p50_ns": NUM, "p99_ns": NUM, "max_ns": NUM}, None),
            "ranks": [RANK_ENTRY],
            "straggler": (
                {
                    "rank": int,
                    "last_count": int,
                    "clear": bool,
                    "region": (str, None),
                    "region_kind": (str, None),
                    "where": (str, None),
                },
                None,
            ),
            "by_region": [
                {"name": str, "region": (str, None), "count": int, "total_ns": NUM, "exposed_ns": NUM}
            ],
            "heatmap": ({"steps": [int], "ranks": [int], "late_ms": [[NUM]]}, None),
        },
        None,
    )
}

SECTION = Section(
    "collectives",
    compute,
    absent={"collectives": None},
    checks=CHECKS,
    diff_metrics=diff_metrics,
    panels=panels,
)
