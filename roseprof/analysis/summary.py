"""Turn a parsed trace (+ the engine's step log) into the run's data: summary.json and normalised tables."""

from __future__ import annotations

from dataclasses import replace

from roseprof.analysis.ranks import assign_ranks
from roseprof.analysis.sections import SECTIONS, SUMMARY_ORDER, Context
from roseprof.model import Trace, spelled_range_names
from roseprof.workload.steplog import StepLogRecords

SUMMARY_SCHEMA = 1


def analyse(
    trace: Trace,
    log: StepLogRecords | None,
    step_range: str | None = None,
    rank_logs: dict[int, StepLogRecords] | None = None,
) -> tuple[dict, dict]:
    """Returns (summary, tables): summary is summary.json; tables are the normalised data kept beside it, by name.
    `step_range`: the range that marks one step of a program that is not the engine (--step-range).
    `rank_logs`: the step logs of ranks 1.. of a run of several ranks, by rank (`log` is rank 0's); a process
    whose pid is a log's gets that log's rank, in `trace.processes` (so the stored run keeps it).

    Each analysis is a section (analysis/sections/): it computes its summary keys and named tables from the
    model and step log; this function runs them in order and assembles summary.json in its key order."""
    # What the reader had to assume, then what the analyses found, in the order they found it.
    logs = {**({0: log} if log is not None else {}), **(rank_logs or {})}
    doubts = assign_ranks(trace, logs)
    # One spelling of a region in every table: the sections see a range outside the default NVTX domain under its
    # `domain:name` (model.spelled_range_names); the tables keyed by (domain, name) take its own name (own_names).
    spelled = spelled_range_names(trace)
    shown = trace if spelled is None else replace(trace, ranges=replace(trace.ranges, name=spelled))
    own_names = None if spelled is None else trace.ranges.name
    ctx = Context(
        shown, log, step_range, warnings=list(trace.warnings), logs=logs, own_names=own_names, doubts=doubts
    )
    parts: dict = {"schema": SUMMARY_SCHEMA, "gpus": trace.gpus, "warnings": ctx.warnings}
    tables: dict = {}
    for section in SECTIONS:
        result = section.compute(ctx) if section.applies(trace) else None
        if result is not None:
            ctx.results[section.name] = result
            tables.update(result.tables)
        parts.update(result.summary if result is not None else section.absent)
    summary = {key: parts.pop(key) for key in SUMMARY_ORDER if key in parts}
    summary.update(parts)  # keys of sections added since, in SECTIONS' order
    return summary, tables
