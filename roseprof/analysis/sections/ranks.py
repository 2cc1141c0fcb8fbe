"""Ranks: one entry per rank of a run of several processes (tensor-parallel engines under nsys, one Kineto file
per rank merged): its processes, its kernels, its own region table and its decode steps joined to its own step
log, beside the all-ranks tables; and how the ranks' clocks were aligned, and how well.

summary.json: `ranks` is [] for a run of one process (its all-ranks tables are that process' own); otherwise one
entry per known rank, lowest first, then one per process of unknown rank. `rank_clock` says how the ranks share a
clock (null where `ranks` is empty). Named tables for later sections: `rank_groups` (the entries' RankGroups),
`op_rank` ([G] index into `ranks` of each GPU op's rank, -1 unknown), `range_rank` ([R] the same per range),
`rank_steps` ({label: step rows}, each rank's steps as the `steps` table has them), `rank_collectives`
((participants, instances, matched) of analysis/collectives.py, for the collectives section)."""

from __future__ import annotations

import numpy as np

from roseprof.analysis.collectives import find_instances, match
from roseprof.analysis.graphs import placed_kernels
from roseprof.analysis.ranks import clock_doubt, collective_end_spread, op_groups, range_groups, rank_groups
from roseprof.analysis.sections.base import Context, Section, SectionResult
from roseprof.analysis.sections.collectives import rank_participants
from roseprof.analysis.stats import dense_ids, ns_stats
from roseprof.analysis.steps import clock_offset, step_table
from roseprof.model import KERNEL, spelled_region
from roseprof.run.checks import NUM, OPT_NUM
from roseprof.workload.steplog import log_rank

SAID_MISSING = 8  # missing ranks named in the warning; the rest are counted
TOP_REGIONS = 100  # per rank, by total time: a rank's table beside the all-ranks one, not a second copy of it


def compute(ctx: Context) -> SectionResult:
    trace = ctx.trace
    groups = rank_groups(trace)
    if not groups:
        return SectionResult({"ranks": [], "rank_clock": None}, {"rank_groups": []})
    op_group, r_group = op_groups(trace, groups), range_groups(trace, groups)
    _missing_ranks(groups, ctx.warnings)
    logs = {log_rank(log, r): log for r, log in ctx.logs.items()}
    kernel = trace.ops.kind == KERNEL
    dur = trace.ops.end - trace.ops.start
    placed = placed_kernels(trace, ctx.gpu.op_range, ctx.capture) if trace.has_gpu else kernel  # conservation
    entries, rank_steps, unlogged, window_joined = [], {}, [], False
    for g, group in enumerate(groups):
        mine = r_group == g
        log = logs.get(group.rank) if group.rank is not None else None
        rows = _steps(ctx, mine, log, group.label)
        if rows is not None:
            rank_steps[group.label] = {k: rows[k] for k in ("index", "start_ns", "dur_ns", "rollovers")}
            window_joined |= "log_index" in rows
            if log is None:
                unlogged.append(group.label)
        entries.append(
            {
                "label": group.label,
                "rank": group.rank,
                "pid": group.pids[0],
                "pids": group.pids,
                "name": group.name,
                "world_size": group.world_size,
                "rank_from": group.rank_from,
                "kernel_count": int((kernel & (op_group == g)).sum()),
                "kernel_ns": int(dur[kernel & (op_group == g)].sum()),
                "kernel_in_regions_ns": int(dur[placed & (op_group == g)].sum()),
                "range_count": int(mine.sum()),
                "steps": _step_stats(rows),
                "regions": _regions(ctx, mine),
            }
        )
    if window_joined and unlogged:
        _number_by_order(rank_steps, unlogged, ctx.warnings)
    unattributed = int((kernel & (op_group < 0)).sum())
    collectives = _collectives(ctx, groups, op_group, r_group, rank_steps)
    clock = {
        "how": _clock_words(trace),
        "collectives": collective_end_spread(*collectives[1:], len(groups)),
        "kernels_of_no_rank": unattributed,
    }
    doubt = clock_doubt(clock["collectives"])
    if doubt is not None:
        ctx.doubts.append(doubt)
    clock["doubts"] = list(ctx.doubts)
    return SectionResult(
        {"ranks": entries, "rank_clock": clock},
        {"rank_groups": groups, "op_rank": op_group, "range_rank": r_group, "rank_steps": rank_steps,
         "rank_collectives": collectives},
    )  # fmt: skip


def _collectives(ctx: Context, groups, op_group, r_group, rank_steps: dict) -> tuple:
    """(participants, instances or None, matched or None): the ranks' collectives found and matched (by decode step
    and place in the step) once, for the clock check here (analysis/ranks.collective_end_spread) and for the
    collectives section (the `rank_collectives` table), so both pair the same collectives."""
    parts = rank_participants(ctx, groups, rank_steps, r_group)
    inst = find_instances(
        ctx.trace, ctx.tree, ctx.gpu.op_range, ctx.capture, op_group, r_group, parts, ctx.kernel_keys.names
    )
    return parts, inst, match(inst, len(groups)) if inst is not None else None


def _missing_ranks(groups, warnings: list[str]) -> None:
    """Says which ranks of the world the trace lacks (a rank's file not given, or never written): the all-ranks
    tables and the collectives are then those of the ranks present only."""
    world = max((g.world_size or 0 for g in groups), default=0)
    present = {g.rank for g in groups if g.rank is not None and 0 <= g.rank < world}
    # The world size is one number from a file: the missing ranks are counted, and the first few named, without
    # building range(world) (a world of 10^9 took 4.5 GiB).
    count = world - len(present)
    if count > 0:
        named = [r for r in range(min(world, len(present) + SAID_MISSING)) if r not in present][:SAID_MISSING]
        said = ", ".join(map(str, named)) + (
            f" and {count - len(named):,} more" if count > len(named) else ""
        )
        warnings.append(
            f"world size {world:,}, but the trace holds no process of rank(s) {said}: every table is the other "
            "ranks' alone"
        )


def _clock_words(trace) -> str:
    if trace.tool.name == "nsys":
        return "one host clock: nsys records every process of the capture on the same clock"
    if trace.clock == "realtime":
        return (
            "Unix time: each rank's file has its own base (Kineto's baseTimeNanoseconds), moved onto the first "
            "file's; the ranks agree as well as their hosts' clocks do (one host: exactly)"
        )
    return "the trace's own clock"


def _steps(ctx: Context, mine: np.ndarray, log, label: str) -> dict | None:
    """The rank's steps: its own decode-step ranges joined to its own step log, as the steps section joins
    rank 0's (by index, or by time over a profiler's window)."""
    trace, tree = ctx.trace, ctx.tree
    r = trace.ranges
    notes: list[str] = []
    rows, _ = step_table(
        trace.names.values, r.start, r.end, r.name, tree.parent, tree.depth, trace.marks.ts, trace.marks.name,
        log, notes, clock_offset(trace.clock, trace.session_start_utc_ns, log), ctx.step_range, mine,
    )  # fmt: skip
    ctx.warnings.extend(f"{label}: {n}" for n in notes if not label.startswith("rank 0"))
    return rows


def _number_by_order(rank_steps: dict, unlogged: list[str], warnings: list[str]) -> None:
    """Renumbers every rank's steps 0, 1, ... by their order in the trace (in place), as a run with no step logs
    is numbered. A rank joined to its log by time (a profiler window) has the engine's step numbers, a rank with
    no log its trace's order: matched by index (the collectives section), step 57 of one would meet step 0 of the
    other and invent a straggler hundreds of milliseconds late."""
    for rows in rank_steps.values():
        rows["index"] = list(range(len(rows["index"])))
    warnings.append(
        f"{', '.join(unlogged)}: no step log of its own (NAME.rank<r>.EXT beside --steplog), so every rank's "
        "steps are matched by their order in the trace, not by the engine's step numbers"
    )


def _step_stats(rows: dict | None) -> dict | None:
    if rows is None:
        return None
    stats = ns_stats(rows["dur_ns"])
    return {"count": stats["count"], "p50_ns": stats["p50_ns"], "p99_ns": stats["p99_ns"]}


def _regions(ctx: Context, mine: np.ndarray) -> list[dict]:
    """The rank's region table: count, total and own time (and kernel time where there is a GPU)."""
    trace = ctx.trace
    idx = np.flatnonzero(mine)
    if not len(idx):
        return []
    r = trace.ranges
    # the run's (domain, name) codes, factorised once for every rank (Context.region_keys); the rank's counted
    keys, code_index = ctx.region_keys
    present, inverse = dense_ids(code_index[idx], len(keys))
    # a range of each group, which names it (the code's width is the names table's when it was made)
    first = np.zeros(len(present), dtype=np.int64)
    first[inverse] = idx
    names = ctx.range_names()
    total = np.bincount(inverse, weights=(r.end - r.start)[idx])
    own = np.bincount(inverse, weights=ctx.tree.self_ns[idx])
    count = np.bincount(inverse)
    kern = np.bincount(inverse, weights=ctx.gpu.kernel_ns[idx]) if trace.has_gpu else None
    rows = [
        {
            "name": trace.names[int(names[k])],
            "domain": trace.domains[int(r.domain[k])],
            "count": int(count[j]),
            "total_ns": int(total[j]),
            "self_ns": int(own[j]),
            "gpu_kernel_ns": int(kern[j]) if kern is not None else None,
        }
        for j, k in enumerate(first.tolist())
    ]
    rows.sort(key=lambda x: (-x["total_ns"], x["name"]))
    return rows[:TOP_REGIONS]


def diff_metrics(before, after) -> list[dict]:
    """Per rank seen on both sides: its decode step p50 and its kernel time (each side's mean over its runs)."""
    out = []
    a_side, b_side = _by_label(before), _by_label(after)
    for label in [x for x in a_side if x in b_side]:
        for key, pick in (("step_p50_ns", lambda e: (e.get("steps") or {}).get("p50_ns")),
                          ("kernel_ns", lambda e: e.get("kernel_ns") if e.get("kernel_count") else None)):  # fmt: skip
            a = [pick(e) for e in a_side[label]]
            b = [pick(e) for e in b_side[label]]
            if a and b and None not in a and None not in b:
                out.append(
                    {
                        "name": f"ranks.{label.replace(' ', '')}.{key}",
                        "a": float(np.mean(a)),
                        "b": float(np.mean(b)),
                    }
                )
    return out


def _by_label(runs) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for run in runs:
        for e in run.summary.get("ranks") or []:
            out.setdefault(e["label"], []).append(e)
    return out


def panels(summary: dict) -> list[dict]:
    """One row per rank, 7 short columns (fits 80 columns): steps and their p50/p99, kernels and their time, the
    rank's busiest region by own time."""
    entries = summary.get("ranks") or []
    if not entries:
        return []
    ms = lambda v: "-" if v is None else f"{v / 1e6:.2f}"  # noqa: E731
    rows = []
    for e in entries:
        st = e.get("steps") or {}
        busiest = max(e["regions"], key=lambda r: r["self_ns"]) if e["regions"] else None
        top = spelled_region(busiest["name"], busiest.get("domain")) if busiest else "-"
        rows.append(
            ["?" if e["rank"] is None else str(e["rank"]), str(e["pid"]), str(st.get("count", "-")),
             ms(st.get("p50_ns")), ms(st.get("p99_ns")), str(e["kernel_count"]),
             ms(e["kernel_ns"] if e["kernel_count"] else None), _middle(top, TOP_NAME_CHARS)]
        )  # fmt: skip
    clock = summary.get("rank_clock") or {}
    spread = clock.get("collectives")
    note = f"clock: {clock.get('how', '?')}"
    if spread and spread.get("matched_by", "order") == "order":
        # Paired by order, the k-th collective of one rank may be another step's on the next: no clock measure.
        note += (
            f"; no decode step matched across ranks: {spread['matched']} collectives paired by order, which says "
            "nothing of how well the clocks agree"
        )
    elif spread:
        note += (
            f"; {spread['matched']} collectives matched {MATCHED_BY['step']}: their ends differ by "
            f"{spread['end_spread_p50_ns'] / 1e3:.1f} µs p50, {spread['end_spread_max_ns'] / 1e3:.1f} µs at most"
        )
    return [
        {
            "title": "ranks: each rank's steps, kernels and busiest region",
            "columns": ["rank", "pid", "steps", "p50 ms", "p99 ms", "kernels", "kern ms", "most own time"],
            "rows": rows,
            "note": note,
        }
    ]


# How the clock check paired the ranks' collectives (`matched_by`; a run stored before it was said: by order).
MATCHED_BY = {"step": "by decode step and place in the step", "order": "by order"}
TOP_NAME_CHARS = 22  # the busiest region's name in the panel: with the other columns, 80 terminal columns


def _middle(name: str, width: int) -> str:
    """`name` cut in the middle to `width` characters (a region's prefix and its last part both say something)."""
    if len(name) <= width:
        return name
    keep = width - 1
    return name[: keep // 2] + "…" + name[len(name) - (keep - keep // 2) :]


REGION = {"name": str, "domain": str, "count": int, "total_ns": NUM, "self_ns": NUM, "gpu_kernel_ns": OPT_NUM}
ENTRY = {
    "label": str,
    "rank": (int, None),
    "pid": int,
    "pids": [int],
    "world_size": (int, None),
    "kernel_count": int,
    "kernel_ns": NUM,
    "kernel_in_regions_ns": NUM,
    "steps": ({"count": int, "p50_ns": OPT_NUM, "p99_ns": OPT_NUM}, None),
    "regions": [REGION],
}
CLOCK = {
    "how": str,
    "kernels_of_no_rank": int,
    "collectives": (
        {
            "matched": int,
            "matched_by": (str, None),
            "ranks": int,
            "end_spread_p50_ns": NUM,
            "end_spread_max_ns": NUM,
            "collective_p50_ns": OPT_NUM,
        },
        None,
    ),
    "doubts": ([str], None),
}

SECTION = Section(
    "ranks",
    compute,
    absent={"ranks": [], "rank_clock": None},
    checks={"ranks": ([ENTRY], None), "rank_clock": (CLOCK, None)},
    stores={"rank_steps": "steps.ranks"},
    diff_metrics=diff_metrics,
    panels=panels,
)
