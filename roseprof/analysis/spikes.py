"""ITL spikes and their causes, from the engine's step log (and, for the step's breakdown, the trace).

A token's inter-token latency (ITL) is the gap between it and its request's previous token: the window
[previous token, this token] on the engine's clock. A token is a spike when its ITL is above

    max(median + K_MAD * MAD, (1 + MIN_EXCESS) * median)

of the run's ITLs (MAD: the median absolute deviation from the median). The MAD term follows the run's own
noise; the floor keeps a run whose steps are all alike (MAD near 0) from calling ordinary jitter a spike.

What each token's window held and what each cause cost in it (the causes, the sharing of a step's extra time):
spike_costs.py. A spike's added latency (ITL - median) is shared among its causes in proportion to what each cost;
the cause that added most is the token's one main cause, shown with its evidence (spike_evidence.py: the region that
grew in the slowest step of the window, or the event); a cause that added under MIN_ADDED_NS is none; what no record
accounts for, over half the excess, is `unknown`. Tokens whose gap holds the profiler's own work or a CUDA-graph
capture are no ITL sample: left out, and counted apart.
"""

from __future__ import annotations

import numpy as np

from roseprof.analysis.spike_costs import CAUSES, attribute
from roseprof.analysis.spike_evidence import LEFT_OUT, evidence_of, left_out_tokens, step_region_excess
from roseprof.model import Trace
from roseprof.workload.steplog import StepLogRecords

K_MAD = 5.0
MIN_EXCESS = 0.25
LISTED = 12  # spikes listed with their step's region and kernel deltas
MIN_ADDED_NS = 1000.0  # a cause that added less than 1 µs to a spike added nothing


def threshold(itl: np.ndarray) -> tuple[float, float, float]:
    """(median, MAD, threshold) of ITL values."""
    med = float(np.median(itl))
    mad = float(np.median(np.abs(itl - med)))
    return med, mad, max(med + K_MAD * mad, (1 + MIN_EXCESS) * med)


def token_causes(log: StepLogRecords, rows: dict | None, trace: Trace | None) -> dict | None:
    """Every token's ITL and what added to it (None: no token after a first): `tok` (attribute's windows), `itl`
    [T] ms, `why_out`/`took_out`/`kept` (tokens left out of the figures), the run's `median_ms`, `mad_ms`,
    `threshold_ms`, `spike` [T], `names` (the causes), `added` [T, C] ns each added, `primary` [T] the main one."""
    tok, costs = attribute(log)
    n = len(tok["end"])
    if n == 0:
        return None
    itl = (tok["end"] - tok["start"]) / 1e6  # [T] ms
    why_out, took_out = left_out_tokens(log, rows, trace, tok["start"], tok["end"])
    kept = why_out == ""
    med, mad, limit = threshold(itl[kept] if kept.any() else itl)
    spike = kept & (itl > limit)
    excess_ns = np.clip(itl - med, 0, None) * 1e6
    names = [c for c in CAUSES if c != "unknown"]
    cost = np.stack([costs[c] for c in names], axis=1)  # [T, C]
    total = cost.sum(axis=1)
    # Shares of the excess, never more than the excess; what no record explains, over half of it: unknown.
    scale = np.where(total > 0, np.minimum(1.0, excess_ns / np.maximum(total, 1.0)), 0.0)
    added = cost * scale[:, None]  # [T, C] ns
    rest = excess_ns - added.sum(axis=1)
    unknown = np.where(rest > 0.5 * excess_ns, rest, 0.0)
    added = np.concatenate([added, unknown[:, None]], axis=1)
    names.append("unknown")
    primary = np.argmax(added, axis=1)  # one main cause per token: the one that added most
    return {
        "tok": tok, "itl": itl, "why_out": why_out, "took_out": took_out, "kept": kept, "median_ms": med,
        "mad_ms": mad, "threshold_ms": limit, "spike": spike, "names": names, "added": added, "primary": primary,
    }  # fmt: skip


def analyse_spikes(
    log: StepLogRecords | None,
    rows: dict | None,
    region_cols: list[str],
    trace: Trace | None,
    kernel_keys=None,
) -> tuple[dict | None, list[list], list[list]]:
    """(summary.json's `spikes`; per request of the ITL series, the main cause of each spike token, None
    elsewhere; per request, why a token is left out of the ITL figures: "profiler", "capture" or None).
    `kernel_keys`: the trace's KernelKeys (sections/base.py), for the kernels of each listed spike's step."""
    if log is None or not log.requests:
        return None, [], []
    tc = token_causes(log, rows, trace)
    if tc is None:
        return None, [[] for _ in log.requests], [[] for _ in log.requests]
    tok, itl, why_out, took_out, kept = tc["tok"], tc["itl"], tc["why_out"], tc["took_out"], tc["kept"]
    med, mad, limit, spike = tc["median_ms"], tc["mad_ms"], tc["threshold_ms"], tc["spike"]
    names, added, primary = tc["names"], tc["added"], tc["primary"]
    n = len(tok["end"])
    where = step_region_excess(rows, region_cols, log.steps)
    starts = np.array([s["start_ns"] for s in log.steps], dtype=np.float64)
    evidence = [
        evidence_of(names[primary[t]], t, tok, added[t, primary[t]], where, log, starts) if spike[t] else None
        for t in range(n)
    ]
    table = []
    n_spikes = int(spike.sum())
    for j, c in enumerate(names):
        sel = spike & (primary == j) & (added[:, j] >= MIN_ADDED_NS)  # a cause that added nothing is none
        if not sel.any():
            continue
        by_where: dict[str, list[float]] = {}
        for t in np.flatnonzero(sel):
            by_where.setdefault(evidence[t][0], []).append(evidence[t][1])
        top = sorted(by_where.items(), key=lambda kv: -sum(kv[1]))[:3]
        table.append(
            {
                "cause": c,
                "label": CAUSES[c],
                "tokens": int(sel.sum()),
                "share_pct": 100.0 * sel.sum() / n_spikes,
                "added_p50_ms": float(np.median(added[sel, j])) / 1e6,
                "added_total_ms": float(added[sel, j].sum()) / 1e6,
                # What took the time: a region (by how much the step's time in it grew) or an event.
                "evidence": [
                    {"where": w, "tokens": len(v), "p50_ms": float(np.median(v)) / 1e6} for w, v in top
                ],
            }
        )
    table.sort(key=lambda e: -e["added_total_ms"])
    steps_of_spikes = {int(s) for s in tok["step"][spike] if s >= 0}
    left_out = {}
    for reason in LEFT_OUT:
        sel = why_out == reason
        if sel.any():
            left_out[reason] = {
                "label": LEFT_OUT[reason],
                "tokens": int(sel.sum()),
                "max_ms": float(itl[sel].max()),
                "took_ms": float(took_out[sel].max()) / 1e6,
            }
    summary = {
        "definition": f"ITL above max(median + {K_MAD:g} x MAD, {1 + MIN_EXCESS:g} x median) of the run's tokens",
        "k_mad": K_MAD,
        "min_excess_pct": 100 * MIN_EXCESS,
        "median_ms": med,
        "mad_ms": mad,
        "threshold_ms": limit,
        "tokens": int(kept.sum()),
        "spike_tokens": n_spikes,
        "spike_steps": len(steps_of_spikes),
        "step_log_version": int(log.meta.get("version", 1)),
        "causes": table,
        "left_out": left_out,
        "listed": _listed(
            log, tok, itl, spike, added, names, rows, region_cols, trace, kernel_keys, evidence
        ),
    }
    per_request, out_per_request, i = [], [], 0
    for r in log.requests:
        m = max(len(r["token_ns"]) - 1, 0)
        per_request.append([names[primary[t]] if spike[t] else None for t in range(i, i + m)])
        out_per_request.append([why_out[t] or None for t in range(i, i + m)])
        i += m
    return summary, per_request, out_per_request


def _listed(
    log, tok, itl, spike, added, names, rows, region_cols, trace, kernel_keys, evidence
) -> list[dict]:
    """The largest spikes, one per decode step (tokens of one step share it), with what the step did."""
    t0 = min(r["arrival_ns"] for r in log.requests)
    best: dict = {}
    for t in np.flatnonzero(spike):
        key = int(tok["step"][t]) if tok["step"][t] >= 0 else ("token", int(t))
        if key not in best or itl[t] > itl[best[key]]:
            best[key] = t
    chosen = sorted(best.values(), key=lambda t: -itl[t])[:LISTED]
    joined = rows is not None and len(rows.get("dur_ns", [])) == len(log.steps)
    kernel_ns = _kernels_per_step(rows, trace, kernel_keys) if joined and kernel_keys is not None else {}
    out = []
    for t in chosen:
        k = int(tok["step"][t])
        entry = {
            "request": int(tok["request"][t]),
            "step": k + log.first_step if k >= 0 else k,  # a flight recorder's: the server's number
            "t_ms": (tok["end"][t] - t0) / 1e6,
            "itl_ms": float(itl[t]),
            "causes": {names[j]: float(added[t, j]) / 1e6 for j in np.flatnonzero(added[t] > 0)},
            "main": {
                "cause": names[int(np.argmax(added[t]))],
                "where": evidence[t][0],
                "ms": evidence[t][1] / 1e6,
            },
        }
        if 0 <= k < len(log.steps):
            s = log.steps[k]
            entry["step_record"] = {key: s.get(key) for key in ("batch_size", "rollovers", "cow", "launched")}
        if joined and 0 <= k < len(rows["dur_ns"]):
            cols = [(name, f"region:{name}") for name in region_cols] + [("(rest)", "rest_ns")]
            entry["regions"] = {
                name: float(rows[col][k] - np.median(rows[col])) for name, col in cols if col in rows
            }
            entry["kernels"] = {
                name: float(per[k] - np.median(per))
                for name, per in kernel_ns.items()
                if per[k] != np.median(per)
            }
        out.append(entry)
    return out


def _kernels_per_step(rows: dict, trace: Trace, keys) -> dict[str, np.ndarray]:
    """Kernel name -> [S] ns of that kernel launched inside each decode step (by its launching call's time).
    `keys`: the run's KernelKeys (sections/base.py), whose distinct names are factorised once per run."""
    o = trace.ops
    if not len(keys.kernels):
        return {}
    starts = np.asarray(rows["start_ns"], dtype=np.int64)
    ends = starts + np.asarray(rows["dur_ns"], dtype=np.int64)
    api, dur = o.api_start[keys.kernels], (o.end - o.start)[keys.kernels]
    owner = np.searchsorted(starts, api, side="right") - 1
    inside = np.flatnonzero((owner >= 0) & (api >= 0) & (api <= ends[np.maximum(owner, 0)]))
    # The kernels inside a step grouped by name (a stable sort keeps each name's kernels in launch order, so the
    # sums are the same floats as one mask a name), names in ascending id order.
    by_name = inside[np.argsort(keys.name_index[inside], kind="stable")]
    group = keys.name_index[by_name]
    bounds = np.flatnonzero(np.diff(group)) + 1
    out = {}
    for sel in np.split(by_name, bounds) if len(by_name) else []:
        idx = int(keys.names[keys.name_index[sel[0]]])
        out[trace.names[idx]] = np.bincount(owner[sel], weights=dur[sel], minlength=len(starts))
    return out
