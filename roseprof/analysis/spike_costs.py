"""What each ITL token's window held, and what each cause cost in it, from the engine's step log (the spikes and
their main causes: spikes.py).

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
    slow_step     a step in the window took longer than the median step beyond what the causes above that it
                  records typically cost (with the overlapped decode the window also holds part of the step before
                  the token's own)
    unknown       the spike's excess that no record accounts for (more than half of it)

The added latency of a spike (ITL - median) is shared among its causes in proportion to what each cost in the
window: the decode step's time over the median step (each of the step's causes up to what it typically costs in
the run's other steps, `step_caps`; the rest a slow step), the prefills' and collections' time inside the window, the host
time outside steps beyond the median; kv_wait takes the rest (`attribute`: per token, the ns each cause cost;
spikes.py shares the spike's excess among them).
"""

from __future__ import annotations

import numpy as np

from roseprof.workload.steplog import StepLogRecords

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
# The causes read from the step's own record, each from its per-step event (step_events)
STEP_EVENTS = {
    "rollover": "rollovers",
    "cow": "cow",
    "batch_change": "batch_change",
    "preemption": "preemption",
}
STEP_CAUSES = tuple(STEP_EVENTS)


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


def step_events(log: StepLogRecords) -> dict[str, np.ndarray]:
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


# What a step cause may explain of a step: this quantile, per unit (a rollover of 30 sequences, 30 units), of the
# other steps it happened in. Not their median: a cause that is dear in a quarter of its steps keeps its cost there.
CAP_QUANTILE = 0.75
# The steps a cause's cost is read from: those where it was the step's only logged cause, where there are this many
# besides the step itself (else every step it happened in): two causes that always come together would each be
# given the pair's cost.
ALONE_FROM = 3


def step_caps(ev: dict[str, np.ndarray], typical_step: float) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """(per step cause (STEP_CAUSES) [S], and per step [S] for its causes together): the most of that step's time
    over the median step they may explain, in ns.

    A cause's: CAP_QUANTILE of what it cost per unit in the other steps it happened in (alone where it was alone in
    more than ALONE_FROM of them), times this step's units; inf where no other step has it (the cause takes what
    the step had, as one rollover in a run does). The step's own time never sets its cap: a sleep in a step that
    also changed its batch is not lent to the batch change by its own excess, however few batch changes the run has.
    Together: where a step logged several causes and more than ALONE_FROM other steps logged the same ones,
    CAP_QUANTILE of those steps' time (two causes that come together are not each given the pair's cost); else
    inf (the sum of the causes' own caps)."""
    excess = np.clip(ev["dur"] - typical_step, 0, None)  # [S]
    units = {c: ev[STEP_EVENTS[c]].astype(np.float64) for c in STEP_CAUSES}  # [S] each
    n_causes = sum((u > 0).astype(int) for u in units.values())  # [S]
    caps = {}
    for c in STEP_CAUSES:
        u = units[c]
        happened = u > 0
        alone = happened & (n_causes == 1)
        pool = alone if alone.sum() > ALONE_FROM else happened  # [S] the steps the cost is read from
        caps[c] = _caps_from(excess / np.maximum(u, 1.0), pool, happened) * np.maximum(u, 1.0)
    together = np.full(len(excess), np.inf)
    mask = sum((units[c] > 0).astype(np.int64) << i for i, c in enumerate(STEP_CAUSES))  # [S] which causes
    for combo in np.unique(mask[n_causes >= 2]):
        same = mask == combo
        if same.sum() > ALONE_FROM + 1:  # more than ALONE_FROM others for each of them
            together[same] = _caps_from(excess, same, same)[same]
    return caps, together


def _caps_from(values: np.ndarray, pool: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """[S]: for each wanted step, CAP_QUANTILE of values[pool] without the step's own value (inf elsewhere, and where
    nothing else is left)."""
    out = np.full(len(values), np.inf)
    if wanted.any() and pool.any():
        ranked = np.sort(values[pool])  # [m]
        # each pool step's place in ranked, where its own value is left out; -1: not in the pool
        own = np.where(pool, np.searchsorted(ranked, values), -1)
        out[wanted] = _quantile_without(ranked, CAP_QUANTILE, own[wanted])
    return out


def _quantile_without(sorted_values: np.ndarray, q: float, left_out: np.ndarray) -> np.ndarray:
    """[K] numpy's linear q-quantile of `sorted_values` [m] with, for each k, the value at index left_out[k] left out
    (-1: none left out); inf where nothing is left to read."""
    m = len(sorted_values)
    drop = left_out >= 0
    n = m - drop.astype(np.int64)  # [K] values left
    h = (np.maximum(n, 1) - 1) * q
    lo = np.floor(h).astype(np.int64)
    t = h - lo
    hi = np.minimum(lo + 1, np.maximum(n - 1, 0))

    def at(i):  # the i-th smallest of what is left
        return sorted_values[np.minimum(i + (drop & (i >= left_out)), m - 1)]

    out = at(lo) + t * (at(hi) - at(lo))
    return np.where(n > 0, out, np.inf)


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
    ev = step_events(log)
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
    # A step's extra time goes to what the log says happened in it, each cause up to what it costs in the run's
    # other steps (step_caps): a step that rolled over or changed its batch and was also slowed by something the log
    # does not record (a sleep, another process) keeps the rest as a slower step (slow_step below), whose evidence
    # names the region that grew, rather than lending it to the rollover or the batch change. Causes present
    # together share what they explain in proportion to their caps; a cause with no other step to go by (inf) takes
    # what the others leave. A step cause that cost nothing keeps a nominal 1 ns, so it is found wherever it
    # happened; as a spike's cause it adds nothing (MIN_ADDED_NS).
    caps, together = step_caps(ev, typical_step) if n_steps else ({}, np.zeros(0))
    together = together[ks] if n_steps else np.full(n_tok, np.inf)  # [T]
    cap = {
        c: np.where(p, caps[c][ks], 0.0) if n_steps else np.zeros(n_tok) for c, p in present.items()
    }  # [T]
    n_present = sum(p.astype(int) for p in present.values())  # [T]
    finite = sum(np.where(np.isinf(v), 0.0, v) for v in cap.values())  # [T] ns
    open_ended = sum(np.isinf(v).astype(int) for v in cap.values())  # [T] causes without a cap of their own
    pair = (n_present >= 2) & np.isfinite(together)  # [T] capped together
    capped = np.minimum(step_excess, np.where(pair, together, finite))
    rest = np.where((open_ended > 0) & ~pair, step_excess - capped, 0.0)
    even = pair & ((open_ended > 0) | (finite <= 0))  # capped together, nothing to weigh the causes by
    for c, p in present.items():
        bounded = np.where(np.isinf(cap[c]), 0.0, cap[c])
        share = np.where(
            even,
            capped / np.maximum(n_present, 1),
            np.where(
                np.isinf(cap[c]), rest / np.maximum(open_ended, 1), capped * bounded / np.maximum(finite, 1.0)
            ),
        )
        costs[c] = np.where(p, np.maximum(share, 1.0), 0.0)
    explained = capped + rest
    # A step slower than the median beyond what the log says happened in it: the trace says where
    # (spike_evidence).
    costs["slow_step"] = step_excess - explained
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
