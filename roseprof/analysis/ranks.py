"""Which rank each process of a run is, and which ranges and GPU ops each rank owns.

A trace of several processes (a tensor-parallel engine under nsys, or one Kineto file per rank merged) knows its
processes (model.Trace.processes) and, where its tool recorded one, their rank. The engine's step logs say it for
every run: each rank's log carries the writing process' `pid`, `rank` and `world_size` in its meta record, so a
process whose pid is a log's gets that log's rank (`rank_from` "step log"; the engine's own word wins over the
tool's, they agree where both speak).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from roseprof.model import KERNEL, Trace, lookup
from roseprof.workload.steplog import StepLogRecords, log_rank

STEP_LOG = "step log"  # Process.rank_from when a step log's meta record named the process


def assign_ranks(trace: Trace, logs: dict[int, StepLogRecords]) -> list[str]:
    """Gives each process whose pid is a log's meta `pid` that log's rank and world size (in place). Returns a line
    for each log whose rank contradicts the one the process' own trace file gives (Kineto's distributedInfo): the
    step logs do not match their traces (logs swapped, or another run's), so no rank's timing can be trusted beside
    another's."""
    contradictions = []
    for file_rank, log in logs.items():
        pid = log.meta.get("pid")
        process = trace.processes.get(pid) if isinstance(pid, int) else None
        if process is None:
            continue
        world = log.meta.get("world_size")
        rank = log_rank(log, file_rank)
        if process.rank is not None and process.rank_from != STEP_LOG and process.rank != rank:
            contradictions.append(
                f"the step logs do not match their traces: rank {rank}'s log names pid {pid}, which its trace says "
                f"is rank {process.rank} ({process.rank_from})"
            )
        process.rank = rank
        if isinstance(world, int) and not isinstance(world, bool) and world > 0:
            process.world_size = world
        process.rank_from = STEP_LOG
    return contradictions


def ranked_pids(trace: Trace) -> dict[int, list[int]]:
    """{rank: its pids}, ranks ascending; empty when no process' rank is known."""
    out: dict[int, list[int]] = {}
    for pid, p in sorted(trace.processes.items()):
        if p.rank is not None:
            out.setdefault(p.rank, []).append(pid)
    return dict(sorted(out.items()))


def range_pids(trace: Trace) -> np.ndarray:
    """[R] the pid of each range's thread (-1 where the trace does not say)."""
    return trace.pids(trace.ranges.tid)


def first_rank_ranges(trace: Trace) -> tuple[np.ndarray | None, str | None, list[int] | None]:
    """([R] bool, note, pids): the ranges whose steps are the run's steps where the ranges come from several
    processes: the lowest known rank's, or, where no rank is known (no step logs), the lowest pid's (the process
    that started the others, where pids have not wrapped: rank 0 starts the engine's other ranks), with a note
    saying so, and those processes' pids. For the ranges of one process every range counts (no mask, no note);
    its pid is returned where other processes launched kernels too and it launched about as many as the most of
    them (at least half: tensor-parallel ranks of which only one marks its steps, whose GPU figures are then its
    own kernels), else None (one process; or a process that marks the steps beside another that launches the
    kernels, a handful of its own at most, whose kernels are then the steps')."""
    if len(set(trace.thread_pids.values())) < 2:
        return None, None, None
    pids = range_pids(trace)
    present = np.unique(pids[pids >= 0])
    if len(present) < 2:
        if not len(present):
            return None, None, None
        ops = trace.ops
        launchers, launches = np.unique(
            trace.pids(ops.api_tid[(ops.kind == KERNEL) & (ops.api_tid >= 0)]), return_counts=True
        )
        launches = launches[launchers >= 0]
        launchers = launchers[launchers >= 0]
        only = int(present[0])
        own = int(launches[launchers == only].sum())
        rank_like = len(launchers) > 1 and own > 0 and 2 * own >= int(launches.max())
        return None, None, ([only] if rank_like else None)
    ranked = ranked_pids(trace)
    if ranked:
        lowest = next(iter(ranked))
        note = None
        if lowest != 0:
            note = f"no process of the trace is known as rank 0: the step table is rank {lowest}'s steps (the lowest rank known)"
        return np.isin(pids, ranked[lowest]), note, list(ranked[lowest])
    # No rank known: one process' steps, never several processes' interleaved as if they were one sequence.
    first = int(present[0])
    note = (
        f"ranges from {len(present)} processes and no rank known (no step log names them): the steps are those "
        f"of pid {first}, the lowest; pass the engine's step logs (--steplog) to join every rank"
    )
    return pids == first, note, [first]


@dataclass
class RankGroup:
    """One entry of summary.json's `ranks`: a rank's processes (a rank may run several, e.g. a Kineto file's
    host pid and pid 0), or one process of unknown rank in a run of several processes."""

    label: str  # "rank 0", or "pid 1234" where the rank is unknown
    rank: int | None
    pids: list[int]  # the main process first (most threads' events), then the rest ascending
    world_size: int | None
    rank_from: str | None
    name: str


def rank_groups(trace: Trace) -> list[RankGroup]:
    """The run's ranks, lowest first, then its processes of unknown rank by pid; empty for a run of one process
    whose world size is not above 1 (its all-ranks tables are that process' own)."""
    used = sorted(set(trace.thread_pids.values()))
    procs = [trace.processes[p] for p in used if p in trace.processes]
    if len(procs) < 2 and not any((p.world_size or 1) > 1 for p in procs):
        return []
    weight = Counter(trace.thread_pids.values())  # threads per pid: the main process has the most
    groups: list[RankGroup] = []
    for rank, pids in ranked_pids(trace).items():
        pids = sorted((p for p in pids if p in weight), key=lambda p: (-weight[p], p))
        if not pids:
            continue
        first = trace.processes[pids[0]]
        groups.append(RankGroup(f"rank {rank}", rank, pids, first.world_size, first.rank_from, first.name))
    for p in procs:
        if p.rank is None:
            groups.append(RankGroup(f"pid {p.pid}", None, [p.pid], p.world_size, None, p.name))
    return groups


def op_groups(trace: Trace, groups: list[RankGroup]) -> np.ndarray:
    """[G] the index in `groups` of the rank that launched each GPU op, -1 where unknown.

    By the launching call's thread; an op the file gives no launching call (launched before the profiler's
    window) takes the rank of the other ops on its device when only one rank launched onto that device."""
    out = np.full(len(trace.ops), -1, dtype=np.int64)
    if not groups or not len(trace.ops):
        return out
    pid_group = {p: i for i, g in enumerate(groups) for p in g.pids}
    out = lookup(pid_group, trace.pids(trace.ops.api_tid))
    unknown = out < 0
    if unknown.any():
        device = trace.ops.device
        for d in np.unique(device[unknown]).tolist():
            owners = np.unique(out[(device == d) & ~unknown])
            if len(owners) == 1:
                out[unknown & (device == d)] = owners[0]
    return out


def range_groups(trace: Trace, groups: list[RankGroup]) -> np.ndarray:
    """[R] the index in `groups` of each range's rank, -1 where unknown."""
    pid_group = {p: i for i, g in enumerate(groups) for p in g.pids}
    return lookup(pid_group, range_pids(trace))


def collective_end_spread(inst, matched, n_groups: int) -> dict | None:
    """How well the ranks' clocks agree: every rank leaves one all-reduce together (within the link's latency), so
    the spread of one collective's ends across ranks bounds the clocks' disagreement plus that latency.

    `inst`, `matched`: the collectives as the arrival-spread analysis finds and matches them (collectives.py: by
    decode step and place in the step), so the check pairs the same collectives it does: two ranks' profiler windows
    that start a step apart hold different numbers of collectives, and pairing the k-th of each by order alone puts
    one step's all-reduce beside another's (hundreds of µs apart on one host). Only where no decode step matched
    (a program without steps) is the k-th collective of each rank paired by order (`matched_by` "order"). GPU
    collectives only: a gloo all-reduce's range ends when its host thread resumes, not together. None where fewer
    than two ranks ran a collective."""
    if inst is None or inst.kind != "gpu":
        return None
    if len(matched.step) and matched.row.shape[1] >= 2:
        ends = inst.end[matched.row].T  # [ranks, M] each matched collective's end on each rank
        by = "step"
    else:
        per_rank = [np.sort(inst.end[inst.who == g]) for g in range(n_groups)]
        per_rank = [e for e in per_rank if len(e)]
        if len(per_rank) < 2:
            return None
        n = min(len(e) for e in per_rank)
        ends = np.stack([e[:n] for e in per_rank])  # [ranks, n] the k-th collective's end on each rank
        by = "order"
    spread = ends.max(axis=0) - ends.min(axis=0)  # [n]
    return {
        "matched": int(ends.shape[1]),
        "matched_by": by,
        "ranks": int(ends.shape[0]),
        "end_spread_p50_ns": float(np.percentile(spread, 50)),
        "end_spread_max_ns": int(spread.max()),
        "collective_p50_ns": float(np.percentile(inst.end - inst.arrival, 50)),
    }


# The same collective ends on every rank within the link's latency (0.4 us p50 on the 2-H200 capture): matched ends
# further apart than this, or than EXPLAINED_X times the median collective's duration, are clocks that disagree, or
# step logs that pair one rank's step with another step of another rank (duplicated records, swapped logs).
EXPLAINED_NS = 1_000_000
EXPLAINED_X = 10


def clock_doubt(ends: dict | None) -> str | None:
    """The line that says the ranks' timings cannot be compared, from `collective_end_spread`'s result, or None. Ends
    paired by order (no decode step matched) say nothing of the clocks: two profiler windows that start a step
    apart pair one step's collective with another's."""
    if not ends or ends.get("matched_by") != "step":
        return None
    bound = min(EXPLAINED_NS, EXPLAINED_X * ends["collective_p50_ns"])
    if ends["end_spread_p50_ns"] <= bound:
        return None
    return (
        f"the ranks' clocks disagree, or their step logs pair different steps: the same collectives end "
        f"{ends['end_spread_p50_ns'] / 1e6:.3f} ms apart (p50 of {ends['matched']}), more than collectives can "
        f"explain ({bound / 1e6:.3f} ms: 1 ms, or 10x their median {ends['collective_p50_ns'] / 1e3:.1f} µs); "
        "no straggler is named"
    )
