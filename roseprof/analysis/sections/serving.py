"""Serving: a load's figures (`roseprof load`, roseprof/load/). The load writes this part of summary.json itself
(no trace is analysed: `applies` is never true for a trace); this section says what the part holds, what diff
compares (bootstrap over requests: TTFT, TPOT, E2E one value per request; ITL every gap, resampled by request) and
what `show` and the dashboard present."""

from __future__ import annotations

import numpy as np

from roseprof.analysis.diff_metric import Sides, sample
from roseprof.analysis.sections.base import Section, SectionResult
from roseprof.analysis.stats import pct
from roseprof.load.serving import PERCENTILES, pct_key, verdict_line
from roseprof.run.checks import NUM, OPT_NUM

_PCTS = {"count": int, "mean_ms": OPT_NUM, **{pct_key(q): OPT_NUM for q in PERCENTILES}}
CHECKS = {
    "serving": (
        {
            "plan": dict,
            "slo": dict,
            "requests": {
                "index": [int],
                "request_id": list,
                "ttft_ms": list,
                "tpot_ms": list,
                "e2e_ms": list,
                "output_tokens": [int],
                "status": [str],
                "warmup": [bool],
                "good": [bool],
            },
            "count": int,
            "completed": int,
            "duration_s": NUM,
            "ttft": _PCTS,
            "tpot": _PCTS,
            "itl": _PCTS,
            "e2e": _PCTS,
            "throughput": {"requests_s": NUM, "output_tok_s": NUM},
            "goodput": {"requests": int, "pct": OPT_NUM, "requests_s": NUM},
            "errors": dict,
            "schedule": dict,
        },
        None,
    )
}
# The quantiles diff compares per latency, and whether a percentile needs the tail samples (bootstrap.min_samples).
DIFF_QUANTILES = (50, 90, 99)


def samples(summary: dict, tokens: list | None) -> dict | None:
    """A stored load's samples (`part_samples` of its `serving` part). None for a run that is no single load."""
    part = summary.get("serving")
    return part_samples(part, tokens) if part else None


def part_samples(part: dict, tokens: list | None) -> dict:
    """One load's samples: per counted, completed request its TTFT, TPOT and E2E; every ITL gap with the request
    it belongs to (the resampling unit). `tokens`: that load's rows of the per-token table."""
    rows = part["requests"]
    keep = [i for i, (s, w) in enumerate(zip(rows["status"], rows["warmup"])) if s == "ok" and not w]
    col = lambda k: np.asarray([rows[k][i] for i in keep if rows[k][i] is not None], dtype=np.float64)  # noqa: E731
    gaps, owner = [], []
    wanted = {rows["index"][i] for i in keep}
    for row in tokens or []:
        if row["index"] in wanted and len(row["t_ms"]) > 1:
            g = np.diff(np.asarray(row["t_ms"], dtype=np.float64))
            gaps.append(g)
            owner.append(np.full(len(g), row["index"], dtype=np.int64))
    return {
        "ttft": col("ttft_ms"),
        "tpot": col("tpot_ms"),
        "e2e": col("e2e_ms"),
        "itl": np.concatenate(gaps) if gaps else np.zeros(0),
        "itl_request": np.concatenate(owner) if owner else np.zeros(0, dtype=np.int64),
    }


def diff_serving(sides: Sides) -> list[dict]:
    runs = sides.runs
    if not all("serving" in r.sections for r in runs):
        return []
    metrics = []
    for key in ("ttft", "tpot", "itl", "e2e"):
        if key == "itl":  # tokens of one request share its fate (its queueing, its batch): resample requests

            def side(g):
                return sample([r.sections["serving"]["itl"] for r in g],
                              [r.sections["serving"]["itl_request"] for r in g], compress=True)  # fmt: skip
        else:

            def side(g, key=key):
                return sample([r.sections["serving"][key] for r in g])

        sa, sb = side(sides.before), side(sides.after)
        if not (sa.values and sb.values):
            continue
        for q in DIFF_QUANTILES:
            metrics.append(sides.metric(f"serving.{key}.p{q}_ms", sa, sb, pct(q), q=q))
    return metrics


def diff_figures(before, after) -> list[dict]:
    """Per-run figures (no sample behind them: never a change alone), the mean over each side's runs."""
    if not all(r.summary.get("serving") for r in before + after):
        return []
    mean = lambda g, f: float(np.mean([f(r.summary["serving"]) for r in g]))  # noqa: E731
    out = []
    for name, f, lower in (
        ("serving.throughput.requests_s", lambda s: s["throughput"]["requests_s"], False),
        ("serving.throughput.output_tok_s", lambda s: s["throughput"]["output_tok_s"], False),
        ("serving.goodput_pct", lambda s: s["goodput"]["pct"] or 0.0, False),
        ("serving.errors", lambda s: float(sum(s["errors"].values())), True),
    ):
        out.append({"name": name, "a": mean(before, f), "b": mean(after, f), "lower_is_better": lower})
    return out


def panels(summary: dict) -> list[dict]:
    part = summary.get("serving")
    if not part:
        return []
    fmt = lambda x: "-" if x is None else f"{x:.3f}" if x < 10 else f"{x:,.1f}"  # noqa: E731
    rows = [
        [label.upper(), f"{part[label]['count']:,}", *(fmt(part[label][pct_key(q)]) for q in PERCENTILES)]
        for label in ("ttft", "tpot", "itl", "e2e")
    ]
    tp, good, sched = part["throughput"], part["goodput"], part["schedule"]
    slo = ", ".join(f"{k[:-3]} {v:g} ms" for k, v in part["slo"].items()) or "none given"
    asked = sched.get("asked_rate")
    achieved = sched.get("achieved_rate")
    sched_text = (
        f"asked {asked} req/s, sent at {achieved:.2f} req/s, lag p99 {sched['lag_p99_ms']:.2f} ms"
        if asked is not None and achieved is not None and sched.get("lag_p99_ms") is not None
        else f"closed loop, {part['plan'].get('concurrency')} concurrent"
    )
    server = (part.get("server") or {}).get("ttft")
    facts = [
        ["requests", f"{part['count']:,} ({part['completed']:,} completed) in {part['duration_s']:.2f} s"],
        ["throughput", f"{tp['requests_s']:,.2f} req/s, {tp['output_tok_s']:,.1f} output tok/s"],
        ["goodput", f"{good['requests']:,} requests ({good['requests_s']:,.2f} req/s); SLO: {slo}"],
        ["schedule", sched_text],
    ]
    if part["errors"]:
        facts.append(["errors", ", ".join(f"{k} {v}" for k, v in sorted(part["errors"].items()))])
    if server:
        facts.append(
            ["server TTFT", f"mean {fmt(server['mean_ms'])} ms (client {fmt(part['ttft']['mean_ms'])} ms)"]
        )  # fmt: skip
    return [
        {"title": verdict_line(part), "columns": [], "rows": [], "note": None, "headline": True},
        {
            "title": "latency (ms, client clock)",
            "columns": ["", "n", *(f"p{q:g}" for q in PERCENTILES)],
            "rows": rows,
            "note": None,
        },
        {"title": "load", "columns": ["", ""], "rows": facts, "note": None},
    ]


SECTION = Section(
    name="serving",
    compute=lambda ctx: SectionResult(),
    applies=lambda trace: False,
    checks=CHECKS,
    diff_samples={"serving": diff_serving},
    diff_metrics=diff_figures,
    panels=panels,
)
