"""Where the analysis sections meet the rest: the analysis step of a capture or import (a trace and its step logs
-> summary.json and the tables the run folder keeps), the sections' checks for the store that reads runs back, and
their panels for the views. The sections are asked as they are now (analysis/sections/SECTIONS), so a section
added to that list is in every one of these."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from roseprof.analysis import samples, sections
from roseprof.analysis.run_data import Shared
from roseprof.analysis.summary import analyse
from roseprof.errors import RoseprofError
from roseprof.model import Trace
from roseprof.run import sample_tables, tables
from roseprof.workload.steplog import log_rank, rank_log_paths, rank_path, read_steplog


def analyse_trace(
    trace: Trace,
    steplog: Path | None,
    label: str = "the step log",
    strict: bool = False,
    step_range: str | None = None,
) -> tuple[dict, dict]:
    """A trace and, where the engine wrote one, its step log -> (summary, parts): summary.json, and the tables the
    run folder keeps, by the part each fills (the sections' `stores`; run/tables.py writes them).

    A damaged step log costs only its damaged lines (warnings in the summary); with `strict` (a log the user
    named) one in which no line is a step-log record is refused in one line naming `label`."""
    log = read_steplog(str(steplog)) if steplog is not None else None
    if strict and log is not None and log.records == 0:
        raise RoseprofError(
            f"{label}: not a roseinfer step log (none of its {log.lines} line(s) is a record)"
        )
    # The other ranks' logs beside rank 0's (steplog.rank<r>.jsonl); a damaged one costs its lines, as rank 0's,
    # and one with no record at all is refused as rank 0's is (strict), or said (a capture's).
    rank_logs, unusable = {}, []
    if steplog is not None:
        for rank, path in rank_log_paths(str(steplog)).items():
            other = read_steplog(path) if rank else None
            # A user's file is named as the user has it (label is their --steplog: rank_path names its ranks').
            other_label = rank_path(label, rank) if strict else f"{label} (rank {rank})"
            if other is not None and other.records:
                rank_logs[rank] = (other, other_label)
            elif other is not None:
                words = f"not a roseinfer step log (none of its {other.lines} line(s) is a record)"
                if strict:
                    raise RoseprofError(f"{other_label}: {words}")
                unusable.append(f"{other_label}: {words}: rank {rank}'s steps are not joined to a log")
    problems = _inconsistent_logs({**({0: (log, label)} if log is not None else {}), **rank_logs}, unusable)
    for file_rank, why in problems.items():
        if strict:  # the user's files: one line, nothing stored
            raise RoseprofError(why)
        unusable.append(f"{why}: left out")  # a capture's own logs: the run is kept without that log
        rank_logs.pop(file_rank, None)
        if file_rank == 0:
            log = None
    summary, data = analyse(trace, log, step_range, {r: lg for r, (lg, _) in rank_logs.items()})
    if log is not None:
        summary["warnings"].extend(log.warnings(label))
    for other, other_label in rank_logs.values():
        summary["warnings"].extend(other.warnings(other_label))
    summary["warnings"].extend(unusable)
    parts = sections.stored_tables(data)
    parts[tables.DIFF_SAMPLES] = diff_samples(summary, parts, trace)
    return summary, parts


def diff_samples(summary: dict, parts: dict, trace: Trace) -> dict:
    """What each section's diff_prepare makes of the run as it is stored (its steps.json and itl.json from `parts`),
    in the shapes run/sample_tables.py keeps: stored at import, so that a diff need not read the trace again."""
    made = samples.made(
        summary, tables.steps_table(parts), parts.get(tables.ITL_SERIES) or [], trace, sections.SECTIONS
    )
    kept = {n: m for n, m in made.items() if m is None or isinstance(m, (Shared, np.ndarray))}
    return {"version": samples.SAMPLES_VERSION, "sections": sample_tables.storable(kept)}


def _inconsistent_logs(logs: dict, warnings: list[str]) -> dict[int, str]:
    """{file rank: why} for each step log ({file rank: (log, label)}) that cannot be one rank of the run: a rank
    outside its own world size, or a rank an earlier log already claims (two logs merged into one rank: its steps
    two processes' as one sequence). A world size of 0 is no world: the log's is read as unknown (ranks.py), and
    `warnings` says so."""
    out, claimed = {}, {}
    for file_rank, (log, label) in sorted(logs.items()):
        rank, world = log_rank(log, file_rank), log.meta.get("world_size")
        if world == 0 and not isinstance(world, bool):
            warnings.append(f"{label}: its meta record says world size 0, which is no world: read as unknown")
        if isinstance(world, int) and not isinstance(world, bool) and world > 0 and rank >= world:
            out[file_rank] = (
                f"{label}: its meta record says rank {rank} of a world size of {world}: no such rank "
                f"(ranks 0 to {world - 1})"
            )
        elif rank in claimed:
            out[file_rank] = (
                f"{label}: its meta record says rank {rank}, as {claimed[rank]} does: two logs of one rank (another "
                "run's, or a copy?) would make one rank's steps of two processes"
            )
        else:
            claimed[rank] = label
    return out


def summary_checks() -> dict:
    """{summary key: spec}: every section's checks of its part of summary.json, for the store (run/ never
    imports analysis/: roseprof.api.open_store hands them over)."""
    return sections.summary_checks()


def section_panels(summary: dict) -> list[dict]:
    """The panels of the analysis sections that offer them (analysis/sections/), from a run's summary alone."""
    return [p for s in sections.SECTIONS if s.panels is not None for p in s.panels(summary)]
