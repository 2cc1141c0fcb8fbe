"""A load's records -> summary.json's `serving` part and the per-token table beside it.

Per request (client clock): TTFT = first token - sent; TPOT = (last token - first token) / (tokens - 1), the mean
gap after the first token (vLLM's); ITL = every gap between consecutive tokens (a chunk of k tokens: one gap then
k - 1 zero gaps); E2E = end - sent. Goodput as vLLM defines it: the requests whose TTFT, TPOT and E2E are each
within the SLO given (a limit not given is no limit), and their rate over the run."""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING

import numpy as np

from roseprof.errors import RoseprofError

if TYPE_CHECKING:  # the client (asyncio, 40 to 90 ms to import) is not needed to read a stored load
    from roseprof.load.client import Record

PERCENTILES = (50, 90, 95, 99, 99.9)
METRICS = ("ttft", "tpot", "itl", "e2e")
SLO_KEYS = ("ttft", "tpot", "e2e")
# The generator fell behind its schedule when the p99 of (sent - due) exceeds this (ms).
BEHIND_MS = 10.0


def parse_slo(text: str | None) -> dict:
    """`ttft=200ms,tpot=5ms,e2e=2s` -> {"ttft_ms": 200.0, ...}."""
    if not text:
        return {}
    out = {}
    for part in text.split(","):
        m = re.fullmatch(r"\s*(ttft|tpot|e2e)\s*=\s*([0-9.]+)\s*(ms|s|us)?\s*", part)
        if not m:
            raise RoseprofError(
                f"--slo {text!r}: each limit is ttft|tpot|e2e=NUMBER[ms|s|us] (e.g. ttft=200ms,tpot=5ms,e2e=2s)"
            )
        try:
            value = float(m.group(2))
        except ValueError:
            raise RoseprofError(f"--slo {text!r}: {m.group(2)!r} is no number") from None
        out[f"{m.group(1)}_ms"] = value * {"ms": 1.0, "s": 1000.0, "us": 0.001, None: 1.0}[m.group(3)]
    return out


def pct_key(q: float) -> str:
    return f"p{q:g}".replace(".", "_") + "_ms"


def percentiles(values) -> dict:
    v = np.asarray(values, dtype=np.float64)
    out = {"count": int(v.size), "mean_ms": float(v.mean()) if v.size else None}
    for q in PERCENTILES:
        out[pct_key(q)] = float(np.percentile(v, q)) if v.size else None
    return out


def request_figures(rec: Record) -> dict:
    """One request's row of the per-request table (ms, relative to nothing: durations)."""
    ms = lambda a, b: None if a is None or b is None else 1e3 * (b - a)  # noqa: E731
    n = len(rec.times)
    tpot = 1e3 * (rec.times[-1] - rec.times[0]) / (n - 1) if n > 1 else None
    return {
        "ttft_ms": ms(rec.sent, rec.first) if rec.status == "ok" or rec.times else None,
        "tpot_ms": tpot,
        "e2e_ms": ms(rec.sent, rec.end) if rec.status == "ok" else None,
        "output_tokens": n,
    }


def itl_gaps(rec: Record) -> list[float]:
    t = rec.times
    return [1e3 * (b - a) for a, b in zip(t, t[1:])]


def summarise(records: list[Record], start: float, plan: dict, slo: dict, warmup_s: float = 0.0) -> dict:
    """The `serving` part: the per-request table (columns), percentiles, throughput, goodput, errors, the
    schedule achieved. Requests sent in the first `warmup_s` seconds are in the table (warmup: true) and in no
    figure. `start`: the load's t0 on the client clock."""
    rows = {k: [] for k in ("index", "request_id", "sent_ms", "due_ms", "ttft_ms", "tpot_ms", "e2e_ms",
                            "prompt_tokens", "output_tokens", "max_tokens", "status", "error", "warmup", "good")}  # fmt: skip
    counted: list[Record] = []
    good = 0
    for rec in sorted(records, key=lambda r: r.index):
        f = request_figures(rec)
        warm = rec.sent is not None and rec.sent - start < warmup_s
        good_one = rec.status == "ok" and all(
            f[k] is not None and f[k] <= slo[k] for k in slo if k != "tpot_ms" or f["tpot_ms"] is not None
        )
        rows["index"].append(rec.index)
        rows["request_id"].append(rec.request_id)
        rows["sent_ms"].append(None if rec.sent is None else 1e3 * (rec.sent - start))
        rows["due_ms"].append(None if rec.due is None else 1e3 * (rec.due - start))
        for k in ("ttft_ms", "tpot_ms", "e2e_ms", "output_tokens"):
            rows[k].append(f[k])
        rows["prompt_tokens"].append(rec.prompt_len)
        rows["max_tokens"].append(rec.max_tokens)
        rows["status"].append(rec.status)
        rows["error"].append(rec.error)
        rows["warmup"].append(warm)
        rows["good"].append(bool(good_one))
        if not warm and rec.sent is not None:
            counted.append(rec)
            good += bool(good_one)
    ok = [r for r in counted if r.status == "ok"]
    figs = [request_figures(r) for r in ok]
    itl = [g for r in ok for g in itl_gaps(r)]
    if counted:
        t0 = min(r.sent for r in counted)
        t1 = max(r.end for r in counted)
    else:
        t0 = t1 = start
    span = max(t1 - t0, 1e-9)
    errors: dict[str, int] = {}
    for r in counted:
        if r.status != "ok":
            errors[r.error or r.status] = errors.get(r.error or r.status, 0) + 1
    lags = [1e3 * (r.sent - r.due) for r in counted if r.due is not None]
    sent_times = sorted(r.sent for r in counted)
    achieved = (
        (len(sent_times) - 1) / (sent_times[-1] - sent_times[0])
        if len(sent_times) > 1 and sent_times[-1] > sent_times[0]
        else None
    )
    asked = plan.get("rate")
    lag_p99 = float(np.percentile(lags, 99)) if lags else None
    return {
        "plan": plan,
        "slo": slo,
        "warmup_s": warmup_s,
        "requests": rows,
        "count": len(counted),
        "completed": len(ok),
        "duration_s": span,
        "ttft": percentiles([f["ttft_ms"] for f in figs]),
        "tpot": percentiles([f["tpot_ms"] for f in figs if f["tpot_ms"] is not None]),
        "itl": percentiles(itl),
        "e2e": percentiles([f["e2e_ms"] for f in figs]),
        "throughput": {
            "requests_s": len(ok) / span,
            "output_tok_s": sum(f["output_tokens"] for f in figs) / span,
        },
        "goodput": {
            "requests": good,
            "pct": 100.0 * good / len(counted) if counted else None,
            "requests_s": good / span,
        },
        "errors": errors,
        "schedule": {
            "asked_rate": asked,
            "achieved_rate": achieved,
            "lag_p50_ms": float(np.percentile(lags, 50)) if lags else None,
            "lag_p99_ms": lag_p99,
            "behind": bool(lag_p99 is not None and lag_p99 > BEHIND_MS),
        },
    }


def token_table(records: list[Record], start: float) -> list[dict]:
    """Per request, every token: arrival (ms after the load's start), id, the server's decode step (roseinfer's
    `token_steps`; None elsewhere), with the server's response id: what joins a client token to a server step."""
    return [
        {
            "index": r.index,
            "request_id": r.request_id,
            "sent_ms": None if r.sent is None else 1e3 * (r.sent - start),
            "end_ms": None if r.end is None else 1e3 * (r.end - start),
            "t_ms": [1e3 * (t - start) for t in r.times],
            "token_ids": list(r.token_ids),
            "steps": list(r.steps),
        }
        for r in sorted(records, key=lambda r: r.index)
    ]


def verdict_line(serving: dict) -> str:
    """The first line `show` prints of a load: "p99 ITL 0.61 ms, goodput 98.2% at 40 req/s"."""
    itl, good = serving["itl"], serving["goodput"]
    rate = serving["plan"].get("rate")
    conc = serving["plan"].get("concurrency")
    at = (
        f"at {conc} concurrent"
        if conc
        else f"at {_num(rate)} req/s"
        if isinstance(rate, (int, float))
        else "at inf req/s"
    )
    p99 = itl.get("p99_ms")
    # ITL is over the completed requests only: with none, a broken stream's tokens are no reason to say "two tokens"
    why = "no completed request streamed two tokens" if serving.get("completed") else "no request completed"
    head = f"p99 ITL {_num(p99)} ms" if p99 is not None else f"no ITL ({why})"
    gp = good.get("pct")
    goodput = f"goodput {gp:.1f}%" if gp is not None else "goodput -"
    if not serving.get("slo"):
        goodput += " (no SLO: every completed request)"
    return f"{head}, {goodput} {at}"


def _num(x) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.3g}" if abs(x) < 100 else f"{x:,.0f}"
