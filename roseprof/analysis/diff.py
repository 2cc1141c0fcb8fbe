"""Compare two runs: per-metric deltas with bootstrap confidence intervals, and a regression verdict.

Method (printed with every diff): each metric is a statistic of a sample (step times, ITL, a region's
instance durations, a kernel's instance durations). Both samples are resampled with replacement
(RESAMPLES times, seeded), the statistic is recomputed on each pair, and the 95% interval of the relative
change (b - a) / a is read off the percentiles of those resampled changes. A change is significant when the
interval excludes zero. No interval (so never significant) below MIN_SAMPLES samples per run, or, for a high
percentile, below the number that leaves TAIL_SAMPLES beyond it (p95: 40, p99: 200; stats.min_samples). Totals (region and kernel time) are divided by the run's number of decode steps
(or compared as run totals when either run has no steps), so runs of different length compare fairly.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

import numpy as np

from roseprof.analysis.stats import (
    CONFIDENCE,
    MIN_SAMPLES,
    RESAMPLES,
    TAIL_SAMPLES,
    clustered,
    groups,
    interval,
    min_samples,
    pct,
    resampled,
)
from roseprof.model import KERNEL, Trace

METHOD = (
    f"bootstrap: {RESAMPLES} resamples of each run's decode steps (ITL: the steps that produced the tokens; "
    f"regions outside the step: their instances), {int(CONFIDENCE * 100)}% percentile interval of the relative "
    f"change; significant when it excludes 0; no interval under {MIN_SAMPLES} samples per run, nor for a "
    f"percentile with fewer than {TAIL_SAMPLES} samples beyond it (p95: {min_samples(95)}, p99: "
    f"{min_samples(99)}); ITL is resampled by decode step; region and kernel totals are per decode step"
)
# What the gate looks at unless --metric says otherwise: the user-facing step and ITL medians and means. Region and
# kernel metrics are many (one per range and kernel) and some move by tens of percent between two captures of the
# same code on a shared machine (seen: roseinfer.sample +57%), which a within-run interval cannot know; gate on
# them by name with --metric.
DEFAULT_GATE = [
    "steps.p50_ns",
    "steps.mean_ns",
    "steps.rollover.p50_ns",
    "steps.normal.p50_ns",
    "itl.p50_ms",
    "itl.at_rollover.p50_ms",
    "itl.elsewhere.p50_ms",
]


@dataclass
class RunData:
    """One run's samples, as the comparison needs them."""

    summary: dict
    step_dur: np.ndarray | None  # [S]
    step_roll: np.ndarray | None  # [S] bool
    itl: np.ndarray | None  # [T] ms
    itl_roll: np.ndarray | None  # [T] bool
    itl_step: np.ndarray | None  # [T] decode step of each token: tokens of one step move together
    step_regions: dict[str, np.ndarray]  # region inside the decode step -> [S] ns per step
    kernel_steps: dict[str, tuple[np.ndarray, float]]  # kernel -> ([S] ns launched in each step, ns outside)
    region_durations: dict[str, np.ndarray]  # name -> instance durations
    region_self: dict[str, float]
    kernel_durations: dict[str, np.ndarray]  # kernel name -> instance durations
    ttft: np.ndarray | None = None  # [R] ms per request (runs stored before itl.json had ttft_ms: None)

    @property
    def steps(self) -> int | None:
        return None if self.step_dur is None else len(self.step_dur)


def prepare(summary: dict, steps: dict | None, itl_rows: list | None, trace: Trace) -> RunData:
    """A stored run's summary, step and ITL tables and trace, as samples to compare."""
    step_dur = step_roll = None
    step_regions = {}
    if steps and steps.get("rows"):
        step_dur = np.asarray(steps["rows"]["dur_ns"], dtype=np.float64)
        step_roll = np.asarray(steps["rows"]["rollovers"]) > 0
        for name in steps.get("regions", []):
            step_regions[name] = np.asarray(steps["rows"][f"region:{name}"], dtype=np.float64)
    itl_rows = itl_rows or []
    itl = itl_roll = itl_step = None
    if itl_rows:
        itl = np.concatenate([np.asarray(r["itl_ms"], dtype=np.float64) for r in itl_rows])
        itl_roll = np.concatenate([np.asarray(r["rollover"], dtype=bool) for r in itl_rows])
        if all("step" in r for r in itl_rows):
            itl_step = np.concatenate([np.asarray(r["step"], dtype=np.int64) for r in itl_rows])
    names = trace.names
    region_durations: dict[str, np.ndarray] = {}
    kernel_durations: dict[str, np.ndarray] = {}
    r = trace.ranges
    if len(r):
        dur, name = r.end - r.start, r.name
        order = np.argsort(name, kind="stable")
        for idx, chunk in zip(*groups(name[order], dur[order])):
            region_durations[names[idx]] = chunk
    kernel_steps: dict[str, tuple[np.ndarray, float]] = {}
    o = trace.ops
    if len(o):
        kernel = o.kind == KERNEL
        dur, name, api = (o.end - o.start)[kernel], o.name[kernel], o.api_start[kernel]
        order = np.argsort(name, kind="stable")
        for idx, chunk in zip(*groups(name[order], dur[order])):
            kernel_durations[names[idx]] = chunk
        if step_dur is not None and len(dur):
            # The step each kernel was launched in, by its API call's time within the step windows.
            starts = np.asarray(steps["rows"]["start_ns"], dtype=np.int64)
            ends = starts + step_dur.astype(np.int64)
            owner = np.searchsorted(starts, api, side="right") - 1
            inside = (owner >= 0) & (api >= 0) & (api <= ends[np.maximum(owner, 0)])
            for idx in np.unique(name):
                sel = name == idx
                per_step = np.bincount(
                    owner[sel & inside], weights=dur[sel & inside], minlength=len(starts)
                ).astype(np.float64)
                kernel_steps[names[idx]] = (per_step, float(dur[sel & ~inside].sum()))
    region_self = {r["name"]: float(r["self_ns"]) for r in summary.get("regions") or []}
    ttft = None
    if itl_rows and all("ttft_ms" in r for r in itl_rows):
        ttft = np.asarray([r["ttft_ms"] for r in itl_rows if r["ttft_ms"] is not None], dtype=np.float64)
    return RunData(
        summary,
        step_dur,
        step_roll,
        itl,
        itl_roll,
        itl_step,
        step_regions,
        kernel_steps,
        region_durations,
        region_self,
        kernel_durations,
        ttft,
    )


def _metric(
    name: str,
    a: np.ndarray,
    b: np.ndarray,
    stat,
    scale_a=1.0,
    scale_b=1.0,
    rng=None,
    lower_is_better=True,
    clusters_a=None,
    clusters_b=None,
    offset_a=0.0,
    offset_b=0.0,
    q: float | None = None,
):
    """A statistic of samples a and b (value = (stat + offset) / scale), with its bootstrap interval; `q` is the
    percentile the statistic is (None: a mean, median or sum), which sets how many samples it needs."""
    va, vb = (float(stat(a)) + offset_a) / scale_a, (float(stat(b)) + offset_b) / scale_b
    entry = {
        "name": name,
        "a": va,
        "b": vb,
        "delta_pct": None,
        "ci_low_pct": None,
        "ci_high_pct": None,
        "significant": False,
        "lower_is_better": lower_is_better,
        "n_a": int(len(a)),
        "n_b": int(len(b)),
        "min_samples": min_samples(q),
    }
    units_a = len(np.unique(clusters_a)) if clusters_a is not None else len(a)
    units_b = len(np.unique(clusters_b)) if clusters_b is not None else len(b)
    if clusters_a is not None and clusters_b is not None:
        entry["units_a"], entry["units_b"] = int(units_a), int(units_b)  # what was resampled (decode steps)
    if va == 0:
        return entry
    entry["delta_pct"] = 100.0 * (vb - va) / va
    if rng is not None and min(units_a, units_b) >= entry["min_samples"]:
        if clusters_a is not None and clusters_b is not None:
            ra, rb = clustered(a, clusters_a, stat, rng), clustered(b, clusters_b, stat, rng)
        else:
            ra, rb = resampled(a, stat, rng), resampled(b, stat, rng)
        ci = interval((ra + offset_a) / scale_a, (rb + offset_b) / scale_b)
        if ci is not None:
            entry["ci_low_pct"], entry["ci_high_pct"] = ci
            entry["significant"] = bool(ci[0] > 0 or ci[1] < 0)
    return entry


def compare(a: RunData, b: RunData, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    metrics: list[dict] = []
    stats = {"p50": (pct(50), 50), "p99": (pct(99), 99), "mean": (np.mean, None)}
    if a.step_dur is not None and b.step_dur is not None:
        for label, ma, mb in (
            ("", None, None),
            ("rollover.", a.step_roll, b.step_roll),
            ("normal.", ~a.step_roll, ~b.step_roll),
        ):
            sa = a.step_dur if ma is None else a.step_dur[ma]
            sb = b.step_dur if mb is None else b.step_dur[mb]
            if len(sa) and len(sb):
                for sname, (fn, q) in stats.items():
                    metrics.append(_metric(f"steps.{label}{sname}_ns", sa, sb, fn, rng=rng, q=q))
            if label and ma.any() and mb.any():
                # Where inside the step the time went, for rollover and normal steps apart (mean ns per step).
                for name in sorted(set(a.step_regions) & set(b.step_regions)):
                    ra, rb = a.step_regions[name][ma], b.step_regions[name][mb]
                    metrics.append(_metric(f"steps.{label}regions.{name}", ra, rb, np.mean, rng=rng))
                    metrics.append(_metric(f"steps.{label}regions_p50.{name}", ra, rb, np.median, rng=rng))
    if a.itl is not None and b.itl is not None:
        everything_a, everything_b = np.ones(len(a.itl), dtype=bool), np.ones(len(b.itl), dtype=bool)
        for label, ma, mb in (
            ("", everything_a, everything_b),
            ("at_rollover.", a.itl_roll, b.itl_roll),
            ("elsewhere.", ~a.itl_roll, ~b.itl_roll),
        ):
            sa, sb = a.itl[ma], b.itl[mb]
            # Tokens of one decode step share that step's latency: resample steps, not tokens.
            ca = a.itl_step[ma] if a.itl_step is not None else None
            cb = b.itl_step[mb] if b.itl_step is not None else None
            if len(sa) and len(sb):
                for q in (50, 95, 99):
                    metrics.append(
                        _metric(
                            f"itl.{label}p{q}_ms", sa, sb, pct(q), rng=rng, clusters_a=ca, clusters_b=cb, q=q
                        )
                    )
    # Totals per decode step (run totals when a run has no steps).
    per_step = a.steps and b.steps
    norm_a, norm_b = (a.steps, b.steps) if per_step else (1.0, 1.0)
    for name in sorted(set(a.region_durations) & set(b.region_durations)):
        da, db = a.region_durations[name], b.region_durations[name]
        if per_step and name in a.step_regions and name in b.step_regions:
            # Inside the decode step: the per-step time is the sample, resampled over steps.
            sa, sb = a.step_regions[name], b.step_regions[name]
            out_a, out_b = float(da.sum() - sa.sum()), float(db.sum() - sb.sum())
            metrics.append(
                _metric(
                    f"regions.{name}.total_ns",
                    sa,
                    sb,
                    np.sum,
                    norm_a,
                    norm_b,
                    rng,
                    offset_a=out_a,
                    offset_b=out_b,
                )
            )
        else:
            metrics.append(_metric(f"regions.{name}.total_ns", da, db, np.sum, norm_a, norm_b, rng))
        ca, cb = len(da) / norm_a, len(db) / norm_b
        metrics.append({"name": f"regions.{name}.count", "a": ca, "b": cb, **_plain_delta(ca, cb)})
        if name in a.region_self and name in b.region_self:
            metrics.append(
                {
                    "name": f"regions.{name}.self_ns",
                    "a": a.region_self[name] / norm_a,
                    "b": b.region_self[name] / norm_b,
                    **_plain_delta(a.region_self[name] / norm_a, b.region_self[name] / norm_b),
                }
            )
    for name in sorted(set(a.kernel_durations) & set(b.kernel_durations)):
        if per_step and name in a.kernel_steps and name in b.kernel_steps:
            (sa, out_a), (sb, out_b) = a.kernel_steps[name], b.kernel_steps[name]
            metrics.append(
                _metric(
                    f"kernels.{name}.total_ns",
                    sa,
                    sb,
                    np.sum,
                    norm_a,
                    norm_b,
                    rng,
                    offset_a=out_a,
                    offset_b=out_b,
                )
            )
        else:
            metrics.append(
                _metric(
                    f"kernels.{name}.total_ns",
                    a.kernel_durations[name],
                    b.kernel_durations[name],
                    np.sum,
                    norm_a,
                    norm_b,
                    rng,
                )
            )
    for key in ("ttft", "tpot"):
        ra, rb = (a.summary.get("requests") or {}).get(key), (b.summary.get("requests") or {}).get(key)
        if ra and rb and ra.get("count") and rb.get("count"):
            for q in ("p50_ms", "p99_ms"):
                if (
                    key == "ttft"
                    and a.ttft is not None
                    and b.ttft is not None
                    and len(a.ttft)
                    and len(b.ttft)
                ):
                    # One sample per request: resampled over requests like the other percentiles.
                    qq = int(q[1:3])
                    metrics.append(_metric(f"requests.ttft.{q}", a.ttft, b.ttft, pct(qq), rng=rng, q=qq))
                    continue
                metrics.append(
                    {"name": f"requests.{key}.{q}", "a": ra[q], "b": rb[q], **_plain_delta(ra[q], rb[q])}
                )
    ta, tb = (
        (a.summary.get("requests") or {}).get("throughput_tok_s"),
        (b.summary.get("requests") or {}).get("throughput_tok_s"),
    )
    if ta and tb:
        metrics.append(
            {
                "name": "requests.throughput_tok_s",
                "a": ta,
                "b": tb,
                **_plain_delta(ta, tb),
                "lower_is_better": False,
            }
        )
    for m in metrics:
        m["per_step"] = bool(per_step) and m["name"].startswith(("regions.", "kernels."))
    return metrics


def _plain_delta(a: float, b: float) -> dict:
    """A change with no sample to resample (a single summary number): never called significant."""
    return {
        "delta_pct": 100.0 * (b - a) / a if a else None,
        "ci_low_pct": None,
        "ci_high_pct": None,
        "significant": False,
        "lower_is_better": True,
    }


def gate(metrics: list[dict], threshold_pct: float | None, patterns: list[str] | None) -> list[dict]:
    """Mark and return the regressions: a gated metric that grew (or, higher-is-better, fell) by more than
    threshold_pct and significantly."""
    patterns = patterns or DEFAULT_GATE
    out = []
    for m in metrics:
        gated = any(fnmatch.fnmatchcase(m["name"], p) for p in patterns)
        d = m["delta_pct"]
        worse = d is not None and (d > 0 if m["lower_is_better"] else d < 0)
        m["regression"] = bool(
            threshold_pct is not None and gated and worse and m["significant"] and abs(d) > threshold_pct
        )
        if m["regression"]:
            out.append(m)
    return out


def kernel_changes(a: RunData, b: RunData) -> dict:
    """Kernels only in one run (new in b, vanished from a), with their per-step time."""
    na, nb = (a.steps, b.steps) if a.steps and b.steps else (1, 1)
    new = {k: float(v.sum()) / nb for k, v in b.kernel_durations.items() if k not in a.kernel_durations}
    gone = {k: float(v.sum()) / na for k, v in a.kernel_durations.items() if k not in b.kernel_durations}
    return {
        "new": sorted(new.items(), key=lambda kv: -kv[1]),
        "vanished": sorted(gone.items(), key=lambda kv: -kv[1]),
    }


def rank(metrics: list[dict]) -> list[dict]:
    """Largest significant changes first, then the rest by size of change."""
    return sorted(metrics, key=lambda m: (not m["significant"], -abs(m["delta_pct"] or 0)))
