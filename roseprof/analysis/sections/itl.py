"""Inter-token latency: per request the token times (the `itl_series` table), ITL percentiles at rollovers and
elsewhere, the benchmark's request figures, and the ITL spikes with one main cause each."""

from __future__ import annotations

from roseprof.analysis.sections.base import Context, Section, SectionResult
from roseprof.analysis.spikes import analyse_spikes
from roseprof.analysis.steps import itl_series, request_metrics
from roseprof.run.checks import MS_STATS, NUM


def compute(ctx: Context) -> SectionResult:
    log, trace = ctx.log, ctx.trace
    rows = ctx.table("steps")
    region_cols = ctx.table("step_regions")
    # Tokens name the log's step indices; rows joined by time cover only the profiled window of them.
    rolls = rows["rollovers"] if rows else None
    if rows and "log_index" in rows:
        rolls = [int(s.get("rollovers", 0)) for s in log.steps]
    spikes, spike_causes, left_out = analyse_spikes(log, rows, region_cols, trace)
    itl, requests = request_metrics(log, rolls, left_out)
    if itl is not None and spikes and spikes.get("left_out"):
        itl["left_out"] = spikes["left_out"]  # the tokens these figures leave out, and why
    series = itl_series(log, rolls, left_out)
    for row, cause in zip(series, spike_causes):
        row["spike_cause"] = cause  # per token: the spike's main cause, None for a token that is no spike
    return SectionResult({"itl": itl, "requests": requests, "spikes": spikes}, {"itl_series": series})


# What a stored summary.json must hold here (run/checks.py's spec language).
CHECKS = {
    "itl": ({**MS_STATS, "at_rollover": MS_STATS, "elsewhere": MS_STATS}, None),
    "requests": (
        {"count": int, "completion_tokens": int, "throughput_tok_s": NUM, "ttft": MS_STATS, "tpot": MS_STATS},
        None,
    ),
}

SECTION = Section("itl", compute, checks=CHECKS)
