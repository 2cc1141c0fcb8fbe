"""ITL spikes and their causes, from the engine's step log (and, for the step's breakdown, the trace).

A token's inter-token latency (ITL) is the gap between it and its request's previous token: the window
[previous token, this token] on the engine's clock. A token is a spike when its ITL is above

    max(median + K_MAD * MAD, (1 + MIN_EXCESS) * median)

of the run's ITLs (MAD: the median absolute deviation from the median). The MAD term follows the run's own
noise; the floor keeps a run whose steps are all alike (MAD near 0) from calling ordinary jitter a spike.

Every token's window is checked against what the step log recorded in it (so a cause is found wherever it
happened, spike or not; the summary counts spikes):
    rollover      the token's decode step gave some sequences a new KV block (how many)
    cow           the step, or a prefill in the window, copied a shared KV block before writing it
    prefill       a prefill of newly admitted requests ran in the window (how many prompt tokens)
    readmission   a prefill recomputed requests that had been preempted
    preemption    a sequence of the previous step was preempted (freed its blocks) before this step
    kv_wait       this token's own request was preempted and waited for free KV blocks (then recomputed)
    batch_change  the step's batch differs from the previous step's (a new CUDA-graph bucket; a drain of the
                  overlapped decode, which launches nothing)
    gc            Python's garbage collector ran in the window (the engine logs gc callbacks, log version 2)
    host          host time in the window outside any step or prefill, beyond what is typical
    slow_step     a step in the window took longer than the median step and the log records nothing above in it
                  (with the overlapped decode the window also holds part of the step before the token's own)
    unknown       the spike's excess that no record accounts for (more than half of it)

The added latency of a spike (ITL - median) is shared among its causes in proportion to what each cost in the
window: the decode step's time over the median step (split evenly among the step's causes), the prefills' and
collections' time inside the window, the host time outside steps beyond the median; kv_wait takes the rest. The
cause that added most is the token's one main cause, shown with its evidence (spike_evidence.py: the region that
grew in the slowest step of the window, or the event); a cause that added under MIN_ADDED_NS is none. Tokens whose
gap holds the profiler's own work or a CUDA-graph capture are no ITL sample: left out, and counted apart.
"""

from __future__ import annotations

import numpy as np

from roseprof.analysis.spike_evidence import LEFT_OUT, evidence_of, left_out_tokens, step_region_excess
from roseprof.model import Trace
from roseprof.workload.steplog import StepLogRecords

K_MAD = 5.0
MIN_EXCESS = 0.25
LISTED = 12  # spikes listed with their step's region and kernel deltas
MIN_ADDED_NS = 1000.0  # a cause that added less than 1 µs to a spike added nothing
CAUSES = {
    "rollover": "KV block rollover",
    "cow": "copy-on-write",
    "prefill": "prefill interleaved",
    "readmission": "re-admission (recompute)",
    "preemption": "preemption",
    "kv_wait": "waited for a free KV block",
    "batch_change": "batch-size change",
    "gc": "Python gc",
    "host": "host time outside decode steps",
    "slow_step": "slower decode step",
    "unknown": "unknown",
}
STEP_CAUSES = ("rollover", "cow", "batch_change", "preemption")


def threshold(itl: np.ndarray) -> tuple[float, float, float]:
    """(median, MAD, threshold) of ITL values."""
    med = float(np.median(itl))
    mad = float(np.median(np.abs(itl - med)))
    return med, mad, max(med + K_MAD * mad, (1 + MIN_EXCESS) * med)


def _busy(intervals: list[tuple[int, int]]):
    """F(t): time covered by the (merged) intervals before t, vectorised over t."""
    if not intervals:
        return lambda t: np.zeros(len(t))
    iv = np.asarray(sorted(intervals), dtype=np.float64)  # [N, 2]
    ends = np.maximum.accumulate(iv[:, 1])
    starts = np.maximum(iv[:, 0], np.concatenate([[-np.inf], ends[:-1]]))
    lens = np.clip(ends - starts, 0, None)
    before = np.concatenate([[0.0], np.cumsum(lens)])

    def covered(t):
        t = np.asarray(t, dtype=np.float64)
        j = np.searchsorted(starts, t, side="right")  # intervals starting before t
        last = np.maximum(j - 1, 0)
        partial = np.where(j > 0, np.clip(np.minimum(t, ends[last]) - starts[last], 0, lens[last]), 0)
        return before[np.maximum(j - 1, 0)] * (j > 0) + partial

    return covered


def _step_events(log: StepLogRecords) -> dict[str, np.ndarray]:
    """Per step of the log [S]: duration, rollovers, cow, batch change, sequences preempted before it."""
    steps = log.steps
    n = len(steps)
    dur = np.array([s["end_ns"] - s["start_ns"] for s in steps], dtype=np.float64)
    last_step = {r["id"]: max(r["token_step"], default=-1) for r in log.requests}
    change = np.zeros(n, dtype=bool)
    preempted = np.zeros(n, dtype=np.int64)
    for k in range(1, n):
        prev, cur = steps[k - 1], steps[k]
        bucket_moved = prev.get("bucket") != cur.get("bucket")
        change[k] = prev["batch_size"] != cur["batch_size"] or bucket_moved or not cur.get("launched", True)
        gone = set(prev.get("requests", [])) - set(cur.get("requests", []))
        # A sequence that left the batch without finishing there was preempted.
        preempted[k] = sum(1 for rid in gone if last_step.get(rid, -1) > k - 1)
    for p in log.preempts:  # version 2: the engine says so (and when)
        k = np.searchsorted([s["start_ns"] for s in steps], p["t_ns"], side="left")
        if k < n and preempted[k] == 0:
            preempted[k] = 1
    return {
        "dur": dur,
        "rollovers": np.array([s.get("rollovers", 0) for s in steps], dtype=np.int64),
        "cow": np.array([s.get("cow", 0) for s in steps], dtype=np.int64),
        "batch_change": change,
        "preemption": preempted,
    }


def _tokens(log: StepLogRecords) -> dict[str, np.ndarray]:
    """Every token after a request's first, in the order of the ITL series [T]."""
    req, start, end, step, readmitted = [], [], [], [], []
    for r in log.requests:
        t, s = r["token_ns"], r["token_step"]
        for i in range(1, len(t)):
            req.append(r["id"])
            start.append(t[i - 1])
            end.append(t[i])
            step.append(s[i])
            # A token after the first that a prefill produced: the request was preempted and recomputed.
            readmitted.append(s[i] < 0)
    return {
        "request": np.asarray(req, dtype=np.int64),
        "start": np.asarray(start, dtype=np.float64),
        "end": np.asarray(end, dtype=np.float64),
        "step": np.asarray(step, dtype=np.int64),
        "readmitted": np.asarray(readmitted, dtype=bool),
    }


def attribute(log: StepLogRecords) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(tokens, costs): per token [T] its window and, per cause, the ns that cause cost inside the window
    (0 where the cause is absent)."""
    tok = _tokens(log)
    ev = _step_events(log)
    n_tok, n_steps = len(tok["end"]), len(ev["dur"])
    costs = {c: np.zeros(n_tok) for c in CAUSES}
    if n_tok == 0:
        return tok, costs
    window = tok["end"] - tok["start"]
    k = tok["step"]
    has_step = (k >= 0) & (k < n_steps)
    ks = np.where(has_step, k, 0)
    typical_step = float(np.median(ev["dur"])) if n_steps else 0.0
    step_excess = np.where(has_step, np.clip(ev["dur"][ks] - typical_step, 0, None) if n_steps else 0, 0)
    present = {
        "rollover": has_step & (ev["rollovers"][ks] > 0) if n_steps else np.zeros(n_tok, bool),
        "cow": has_step & (ev["cow"][ks] > 0) if n_steps else np.zeros(n_tok, bool),
        "batch_change": has_step & ev["batch_change"][ks] if n_steps else np.zeros(n_tok, bool),
        "preemption": has_step & (ev["preemption"][ks] > 0) if n_steps else np.zeros(n_tok, bool),
    }
    n_step_causes = sum(p.astype(int) for p in present.values())
    # A step's extra time goes to what the log says happened in it. A step cause that cost nothing keeps a
    # nominal 1 ns, so it is found wherever it happened; as a spike's cause it adds nothing (MIN_ADDED_NS).
    share = np.maximum(step_excess, 1.0) / np.maximum(n_step_causes, 1)
    for c, p in present.items():
        costs[c] = np.where(p, share, 0.0)
    # A step slower than the median with nothing in the log to say why: the trace says where (spike_evidence).
    costs["slow_step"] = np.where(n_step_causes == 0, step_excess, 0.0)
    # With the overlapped decode a token's window also holds (part of) the step before its own: the extra time
    # of every other step inside the window counts too.
    if n_steps:
        st = np.array([s["start_ns"] for s in log.steps], dtype=np.float64)
        ex = np.clip(ev["dur"] - typical_step, 0, None)
        rate = ex / np.maximum(ev["dur"], 1.0)
        cum = np.concatenate([[0.0], np.cumsum(ex)])

        def excess_before(t):
            j = np.searchsorted(st, t, side="right") - 1
            jj = np.maximum(j, 0)
            return np.where(j >= 0, cum[jj] + rate[jj] * np.clip(t - st[jj], 0, ev["dur"][jj]), 0.0)

        in_window = excess_before(tok["end"]) - excess_before(tok["start"])
        own = np.where(
            has_step,
            np.clip(
                np.minimum(tok["end"], st[ks] + ev["dur"][ks]) - np.maximum(tok["start"], st[ks]), 0, None
            )
            * rate[ks],
            0.0,
        )
        costs["slow_step"] += np.clip(in_window - own, 0, None)
    seen: set[int] = set()
    new_iv, readmit_iv = [], []
    for p in sorted(log.prefills, key=lambda p: p["start_ns"]):
        ids = set(p.get("requests", []))
        again = ids & seen or set(p.get("readmitted", []))
        seen |= ids
        (readmit_iv if again else new_iv).append((p["start_ns"], p["end_ns"]))
    steps_f = _busy([(s["start_ns"], s["end_ns"]) for s in log.steps])
    new_f, readmit_f = _busy(new_iv), _busy(readmit_iv)
    gc_f = _busy([(g["start_ns"], g["end_ns"]) for g in log.gc])

    def inside(f):
        return f(tok["end"]) - f(tok["start"])

    # A copy-on-write inside a prefill (a full prefix hit recomputes its last token into a shared block): found
    # for every token whose window holds that prefill, at a nominal cost (its time is the prefill's).
    for p in log.prefills:
        if p.get("cow"):
            hit = (tok["start"] <= p["start_ns"]) & (p["end_ns"] <= tok["end"])
            costs["cow"] = np.where(hit & (costs["cow"] == 0), 1.0, costs["cow"])
    costs["prefill"] = inside(new_f)
    costs["readmission"] = inside(readmit_f)
    costs["gc"] = inside(gc_f)
    outside = np.clip(window - inside(steps_f) - costs["prefill"] - costs["readmission"], 0, None)
    costs["host"] = np.clip(outside - float(np.median(outside)) - costs["gc"], 0, None)
    # The request's own wait: it left the batch inside the window (preempted), or a prefill emitted the token.
    waited = tok["readmitted"].copy()
    for p in log.preempts:
        waited |= (tok["request"] == p["request"]) & (tok["start"] <= p["t_ns"]) & (p["t_ns"] <= tok["end"])
    others = sum(costs[c] for c in CAUSES if c not in ("kv_wait", "unknown"))
    excess = window - float(np.median(window))
    costs["kv_wait"] = np.where(waited, np.clip(excess - others, 1.0, None), 0.0)
    return tok, costs


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
            "step": k,
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
