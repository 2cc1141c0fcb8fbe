"""A sweep (`roseprof load --sweep`): one open-loop load per request rate, the throughput-latency curve they draw,
and its knee. The rates are the user's (`--sweep 5,10,20`) or found (`--sweep auto`, as GuideLLM's sweep finds
them): a closed loop of one request at a time gives the lowest useful rate, a closed loop saturated with requests
gives the most the server completes; the sweep's rates lie evenly between the two, both ends included."""

from __future__ import annotations

import math

import numpy as np

from roseprof.errors import RoseprofError
from roseprof.load.serving import pct_key

AUTO_POINTS = 5  # rates an automatic sweep measures, from the one-at-a-time rate to the saturated one
AUTO_SATURATE = 64  # requests in flight for the saturated probe (unless --concurrency says otherwise)
# The knee (see `knee`):
KEEP_UP = 0.9  # a rate is kept up with when requests complete at >= this share of the rate asked
RISE = 2.0  # latency has risen sharply when TTFT p50 exceeds RISE x the lowest rate's TTFT p50 ...
RISE_SLACK_MS = 5.0  # ... plus this (so that a sub-millisecond TTFT's jitter is no rise)


def parse_rates(text: str) -> list[float] | None:
    """`--sweep 5,10,20` -> [5.0, 10.0, 20.0] (sorted, each once); `auto` -> None (found by `auto_rates`)."""
    if text.strip().lower() == "auto":
        return None
    rates = []
    for part in text.split(","):
        try:
            rate = float(part)
        except ValueError:
            raise RoseprofError(
                f"--sweep {text!r}: {part.strip()!r} is no rate (RATE,RATE,... or auto)"
            ) from None
        if not (math.isfinite(rate) and rate > 0):
            raise RoseprofError(f"--sweep {text!r}: each rate is a finite number of requests/s > 0")
        rates.append(rate)
    return sorted(set(rates))


def auto_rates(lowest: float, saturated: float, points: int = AUTO_POINTS) -> list[float]:
    """`points` rates evenly from `lowest` (one request at a time) to `saturated` (the most completed), each to
    two significant figures (so that two automatic sweeps of one server tend to share rates, which is what their
    diff compares), each once. A saturated rate no higher than the lowest (a server that gains nothing from
    concurrency) gives one rate."""
    if not (lowest > 0 and saturated > 0):
        raise RoseprofError("--sweep auto: the probes completed no request, so no rate can be chosen")
    hi = max(lowest, saturated)
    return sorted({_two_figures(r) for r in np.linspace(lowest, hi, points)})


def _two_figures(x: float) -> float:
    return float(f"{x:.2g}")


def completion_rate(part: dict) -> float | None:
    """Requests completed per second while they completed: (n - 1) / (last end - first end) over the counted,
    completed requests. At a rate the server keeps up with, requests end as they were sent (at the rate asked);
    past it they end at the server's pace. Unlike requests / (first sent to last end) it does not fall with a
    short load's ramp-up and drain."""
    rows = part["requests"]
    ends = sorted(
        s + e
        for s, e, st, w in zip(rows["sent_ms"], rows["e2e_ms"], rows["status"], rows["warmup"])
        if st == "ok" and not w and s is not None and e is not None
    )
    if len(ends) < 2 or ends[-1] <= ends[0]:
        return None
    return 1e3 * (len(ends) - 1) / (ends[-1] - ends[0])


def curve_row(part: dict) -> dict:
    """One rate's point of the curve (ms, requests/s, tokens/s)."""
    p = lambda fam, q: part[fam].get(pct_key(q))  # noqa: E731
    return {
        "asked_rate": part["plan"]["rate"],
        "sent_rate": part["schedule"].get("achieved_rate"),
        "achieved_rate": completion_rate(part),
        "output_tok_s": part["throughput"]["output_tok_s"],
        "ttft_p50_ms": p("ttft", 50),
        "ttft_p99_ms": p("ttft", 99),
        "itl_p50_ms": p("itl", 50),
        "itl_p99_ms": p("itl", 99),
        "goodput_pct": part["goodput"]["pct"],
    }


def curve(parts: list[dict]) -> list[dict]:
    """The curve of a sweep's loads: a point per rate asked, in rate order; a rate measured K times (--repeat K)
    has the median of its K loads' figures (so that one load disturbed by the machine does not move the point)."""
    by_rate: dict[float, list[dict]] = {}
    for part in parts:
        by_rate.setdefault(part["plan"]["rate"], []).append(curve_row(part))
    out = []
    for rate in sorted(by_rate):
        rows = by_rate[rate]
        point = {k: _median([r[k] for r in rows]) for k in rows[0]}
        point["asked_rate"], point["loads"] = rate, len(rows)
        out.append(point)
    return out


def _median(values: list) -> float | None:
    known = [v for v in values if v is not None]
    return float(np.median(known)) if known else None


def knee(curve: list[dict]) -> dict:
    """The knee of a throughput-latency curve (rows as `curve_row` makes them, any order): the highest asked rate
    up to which every point is healthy, where a point is healthy when

      - it keeps up: its achieved rate (requests completed per second while they completed) is at least
        KEEP_UP (90%) of the rate the requests were sent at: the rate asked as the seeded arrivals realised it
        (N Poisson arrivals realise a rate within about 1/sqrt(N) of the one asked, so the sent rate, not the
        asked one, is the fair yardstick for a short load; the asked one where fewer than two were sent), and
      - its latency has not risen sharply: its TTFT p50 is at most RISE (2x) the lowest rate's TTFT p50 plus
        RISE_SLACK_MS (5 ms). TTFT is where a server past its capacity shows first: requests wait in its queue.

    The first unhealthy point (in rate order) ends the search, so a noisy point above it cannot make the knee.
    Returns {"index" (into the rows in rate order; None: the lowest rate is already past it), "rate", "why"
    (what the next point did, or that no point was past it), "saturated" (whether any point was unhealthy)}."""
    rows = sorted(curve, key=lambda r: r["asked_rate"])
    if not rows:
        return {"index": None, "rate": None, "why": "no rate was measured", "saturated": False}
    base = rows[0]["ttft_p50_ms"]
    found = None
    for i, row in enumerate(rows):
        why = _unhealthy(row, base)
        if why:
            rate = None if found is None else rows[found]["asked_rate"]
            return {
                "index": found,
                "rate": rate,
                "why": f"at {row['asked_rate']:g} req/s {why}",
                "saturated": True,
            }
        found = i
    return {
        "index": found,
        "rate": rows[found]["asked_rate"],
        "why": "every rate measured was kept up with: the knee is at or above the highest",
        "saturated": False,
    }


def _unhealthy(row: dict, base_ttft: float | None) -> str | None:
    achieved, sent = row["achieved_rate"], row.get("sent_rate") or row["asked_rate"]
    if achieved is None:
        return "fewer than two requests completed"
    if achieved < KEEP_UP * sent:
        return f"requests completed at {achieved:.3g} req/s, sent at {sent:.3g} (< {100 * KEEP_UP:g}%)"
    ttft = row["ttft_p50_ms"]
    if base_ttft is not None and ttft is not None and ttft > RISE * base_ttft + RISE_SLACK_MS:
        return f"TTFT p50 rose to {ttft:.3g} ms ({ttft / base_ttft:.1f}x the lowest rate's)"
    return None


def headline(curve: list[dict], found: dict) -> str:
    """`show`'s first line of a sweep."""
    rows = sorted(curve, key=lambda r: r["asked_rate"])
    top = max((r["output_tok_s"] for r in rows), default=0.0)
    if len(rows) > 1:
        span = f"{len(rows)} rates {rows[0]['asked_rate']:g}-{rows[-1]['asked_rate']:g} req/s"
    else:
        span = f"1 rate, {rows[0]['asked_rate']:g} req/s" if rows else "no rate"
    if found["rate"] is None:
        return f"no knee: past it at the lowest rate; {span}"
    at = rows[found["index"]]
    word = "knee" if found["saturated"] else "no knee up to"
    return (
        f"{word} {found['rate']:g} req/s (TTFT p50 {at['ttft_p50_ms']:.3g} ms); {span}, max {top:,.0f} tok/s"
    )
