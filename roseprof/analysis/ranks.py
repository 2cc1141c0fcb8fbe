"""Which rank each process of a run is, and which ranges and GPU ops each rank owns.

A trace of several processes (a tensor-parallel engine under nsys, or one Kineto file per rank merged) knows its
processes (model.Trace.processes) and, where its tool recorded one, their rank. The engine's step logs say it for
every run: each rank's log carries the writing process' `pid`, `rank` and `world_size` in its meta record, so a
process whose pid is a log's gets that log's rank (`rank_from` "step log"; the engine's own word wins over the
tool's, they agree where both speak).
"""

from __future__ import annotations

import numpy as np

from roseprof.model import Trace
from roseprof.workload.steplog import StepLogRecords, log_rank

STEP_LOG = "step log"  # Process.rank_from when a step log's meta record named the process


def assign_ranks(trace: Trace, logs: dict[int, StepLogRecords]) -> None:
    """Gives each process whose pid is a log's meta `pid` that log's rank and world size (in place)."""
    for file_rank, log in logs.items():
        pid = log.meta.get("pid")
        process = trace.processes.get(pid) if isinstance(pid, int) else None
        if process is None:
            continue
        world = log.meta.get("world_size")
        process.rank = log_rank(log, file_rank)
        if isinstance(world, int) and not isinstance(world, bool) and world > 0:
            process.world_size = world
        process.rank_from = STEP_LOG


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


def first_rank_ranges(trace: Trace) -> np.ndarray | None:
    """[R] bool: the ranges of the lowest known rank's processes, where the ranges come from several processes
    and a rank is known; None otherwise (every range counts, as in a run of one process)."""
    pids = range_pids(trace)
    if len(np.unique(pids)) < 2:
        return None
    ranked = ranked_pids(trace)
    if not ranked:
        return None
    return np.isin(pids, next(iter(ranked.values())))
