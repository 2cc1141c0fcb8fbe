"""Inter-token latency: per request the token times (the `itl_series` table), ITL percentiles at rollovers and
elsewhere, the benchmark's request figures, and the ITL spikes with one main cause each."""

from __future__ import annotations

import numpy as np

from roseprof.analysis.diff_metric import Sides, figure, sample
from roseprof.analysis.samples import itl_samples
from roseprof.analysis.sections.base import Context, Section, SectionResult
from roseprof.analysis.spikes import analyse_spikes
from roseprof.analysis.stats import pct
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
    # The kernels' keys only where the spikes list kernels per step: a trace and its steps joined by time.
    keys = ctx.kernel_keys if trace is not None and rows else None
    spikes, spike_causes, left_out = analyse_spikes(log, rows, region_cols, trace, keys)
    itl, requests = request_metrics(log, rolls, left_out)
    if itl is not None and spikes and spikes.get("left_out"):
        itl["left_out"] = spikes["left_out"]  # the tokens these figures leave out, and why
    series = itl_series(log, rolls, left_out)
    for row, cause in zip(series, spike_causes):
        row["spike_cause"] = cause  # per token: the spike's main cause, None for a token that is no spike
    return SectionResult({"itl": itl, "requests": requests, "spikes": spikes}, {"itl_series": series})


def diff_itl(sides: Sides) -> list[dict]:
    """ITL percentiles (all tokens, at rollovers, elsewhere), resampled by the decode step behind each token."""
    if not all(r.itl is not None for r in sides.runs):
        return []
    metrics = []
    clustered_itl = all(r.itl_step is not None for r in sides.runs)
    for label, sel in (("", None), ("at_rollover.", True), ("elsewhere.", False)):

        def itl_sample(g, sel=sel):
            ms = [np.ones(len(r.itl), bool) if sel is None else r.itl_roll == sel for r in g]
            # Tokens of one decode step share that step's latency: resample steps, not tokens.
            cl = [r.itl_step[m] for r, m in zip(g, ms)] if clustered_itl else None
            return sample([r.itl[m] for r, m in zip(g, ms)], cl, compress=True)

        sa, sb = itl_sample(sides.before), itl_sample(sides.after)
        if sa.values and sb.values:
            for q in (50, 95, 99):
                metrics.append(sides.metric(f"itl.{label}p{q}_ms", sa, sb, pct(q), q=q))
    return metrics


def diff_requests(sides: Sides) -> list[dict]:
    """TTFT, one sample per request, resampled over requests (and runs) like the other percentiles; the
    benchmark's own request figures (no sample behind them) as the mean over the runs."""
    ga, gb = sides.before, sides.after
    metrics = []
    ttft_ok = all(r.ttft is not None and len(r.ttft) for r in ga + gb)
    if ttft_ok:
        for q in (50, 99):
            sa, sb = sample([r.ttft for r in ga]), sample([r.ttft for r in gb])
            metrics.append(sides.metric(f"requests.ttft.p{q}_ms", sa, sb, pct(q), q=q))
    for key, q, lower in [(k, q, True) for k in ("ttft", "tpot") for q in ("p50_ms", "p99_ms")] + [
        (None, "throughput_tok_s", False)
    ]:
        if key == "ttft" and ttft_ok:
            continue
        va, vb = _request_figure(ga, key, q), _request_figure(gb, key, q)
        if va and vb:
            label = f"requests.{key}.{q}" if key else f"requests.{q}"
            metrics.append(figure(label, va, vb, lower))
    return metrics


def _request_figure(g: list, key: str | None, q: str) -> float | None:
    values = []
    for r in g:
        req = r.summary.get("requests") or {}
        if key is None:
            values.append(req.get(q))
        else:
            values.append((req.get(key) or {}).get(q) if (req.get(key) or {}).get("count") else None)
    return float(np.mean(values)) if values and all(values) else None


# What a stored summary.json must hold here (run/checks.py's spec language).
CHECKS = {
    "itl": ({**MS_STATS, "at_rollover": MS_STATS, "elsewhere": MS_STATS}, None),
    "requests": (
        {"count": int, "completion_tokens": int, "throughput_tok_s": NUM, "ttft": MS_STATS, "tpot": MS_STATS},
        None,
    ),
}

SECTION = Section(
    "itl",
    compute,
    checks=CHECKS,
    stores={"itl_series": "itl.series"},
    diff_samples={"itl": diff_itl, "requests": diff_requests},
    diff_prepare=itl_samples,
)
