"""An SLO capture's breaches explained (`roseinfer serve --capture-on itl=2ms --capture-dir DIR`; `roseprof import
DIR` makes each file a run). The file's meta record says why the server wrote it (`slo_capture`: the limits, the
breaches: request, metric, value, the token and its decode step); the words come from the same place as
`roseprof live`'s (live/join.Explainer: the spike causes, the region that grew), but from the server's clock
alone, since no client was watching.

The meta record is the file's, so read defensively: a breach that is not the shape below is left out and counted.
"""

from __future__ import annotations

from roseprof.live.join import Explainer
from roseprof.workload.steplog import StepLogRecords

_INT_FIELDS = ("value_ns", "limit_ns", "request", "token", "step")
NAMES = {"itl": "ITL", "ttft": "TTFT", "e2e": "E2E"}


def breaches(log: StepLogRecords) -> dict | None:
    """summary.json's `slo_capture` part (None: the log is no SLO capture)."""
    capture = log.meta.get("slo_capture")
    if not isinstance(capture, dict):
        return None
    listed = capture.get("breaches")
    listed = listed if isinstance(listed, list) else []
    good = [b for b in listed if _well_formed(b)]
    first = log.first_step
    explain = Explainer(log, first) if log.steps else None
    by_id = {r["id"]: r for r in log.requests}
    out = []
    for b in good:
        cause, words = explain_one(explain, log, first, b, by_id.get(b["request"]))
        value_ms, limit_ms = b["value_ns"] / 1e6, b["limit_ns"] / 1e6
        at = f" at token {b['token']}" if b["metric"] != "e2e" else ""
        line = f"req {b['request_id']}: {NAMES[b['metric']]} {value_ms:.1f} ms > {limit_ms:g} ms{at}: {words}"
        out.append({**b, "ms": value_ms, "limit_ms": limit_ms, "cause": cause, "line": line})
    count = capture.get("breach_count")
    skipped = capture.get("skipped_before")
    return {
        "breaches": out,
        "breach_count": count if isinstance(count, int) else len(good),
        "malformed": len(listed) - len(good),
        "skipped_before": skipped if isinstance(skipped, int) else 0,
        "first_step": first,
        "steps": len(log.steps),
    }


def _well_formed(b) -> bool:
    return (
        isinstance(b, dict)
        and b.get("metric") in NAMES
        and isinstance(b.get("request_id"), str)
        and all(isinstance(b.get(k), int) and not isinstance(b.get(k), bool) for k in _INT_FIELDS)
    )


def explain_one(
    explain: Explainer | None, log: StepLogRecords, first: int, b: dict, record
) -> tuple[str, str]:
    """(cause, words) of one breach."""
    if b["metric"] == "ttft" or (b["metric"] == "itl" and b["step"] < 0):
        return _prefill_words(log, record, b["metric"] == "itl")
    if b["metric"] == "e2e":
        return _e2e_words(explain, log, first, record)
    return _step_words(explain, b["request"], b["step"] - first, b["step"])


def _step_words(explain: Explainer | None, seq: int, pos: int, step: int) -> tuple[str, str]:
    """The cause of the gap before a request's token at step position `pos` (the spike causes' words)."""
    t = explain.index.get((seq, pos)) if explain is not None and explain.tc is not None else None
    if t is None:
        return "unknown", f"step {step}: its token is outside the capture's steps"
    tc = explain.tc
    j = int(tc["primary"][t])
    added = tc["added"][t]
    cause = tc["names"][j] if added[j] > 0 else "none"
    return cause, explain.words(cause, t, pos, added[j] / 1e6)


def _prefill_words(log: StepLogRecords, record, readmitted: bool) -> tuple[str, str]:
    """A first token's wait (or a readmitted request's, after a preemption): queued, then its prefill."""
    if record is None:
        return "unknown", "the capture has no record of the request"
    prefills = [p for p in log.prefills if record["id"] in p.get("requests", [])]
    prefill = prefills[-1] if readmitted and prefills else prefills[0] if prefills else None
    if prefill is None:
        return "unknown", "its prefill is older than the capture's steps"
    since = record["arrival_ns"] if not readmitted else _preempted_at(log, record["id"], prefill["start_ns"])
    queued = (prefill["start_ns"] - since) / 1e6
    took = (prefill["end_ns"] - prefill["start_ns"]) / 1e6
    others = len(prefill.get("requests", [])) - 1
    what = "preempted, then queued" if readmitted else "queued"
    words = (
        f"{what} {queued:.1f} ms, then a {prefill.get('tokens', 0)}-token prefill"
        f"{f' with {others} other request(s)' if others else ''} ({took:.1f} ms)"
    )
    return ("queued" if queued > took else "prefill"), words


def _preempted_at(log: StepLogRecords, seq: int, before_ns: int) -> int:
    times = [p["t_ns"] for p in log.preempts if p["request"] == seq and p["t_ns"] <= before_ns]
    return max(times) if times else before_ns


def _e2e_words(explain, log: StepLogRecords, first: int, record) -> tuple[str, str]:
    """A whole request too slow: its worst gap in the capture, and why."""
    if record is None or len(record["token_ns"]) < 2:
        return "unknown", "the capture holds too few of its tokens to say why"
    t, steps = record["token_ns"], record["token_step"]
    gaps = [(b - a, i + 1) for i, (a, b) in enumerate(zip(t, t[1:]))]
    gap, i = max(gaps)
    pos = steps[i]
    if pos < 0:
        cause, words = _prefill_words(log, record, True)
    else:
        cause, words = _step_words(explain, record["id"], pos, first + pos)
    return cause, f"worst gap {gap / 1e6:.1f} ms before token {i} of the capture's: {words}"
