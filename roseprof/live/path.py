"""The HTTP path's own cost, from a live run's two sides on one clock: where a client's TTFT and token gaps went
between the client and the engine.

The server stamps each request's arrival (when its HTTP handler took it) and each token's emission (when the
engine core produced it) on time.monotonic_ns; the load stamps what it sent and read on the client clock and keeps
the monotonic reading at its start (serving's `clock`). On one host the two are one clock, so per request:

    client TTFT = HTTP in (sent -> the server's arrival) + engine (arrival -> first token emitted)
                  + delivery (emitted -> the client read it)
    engine      = queue (arrival -> the start of the prefill that took it) + prefill (-> first token emitted)

and the queue is told apart by what the engine was doing at the arrival: a request that arrived while a step or a
prefill ran waits for it (`busy_at_arrival`, and `step_wait`: arrival -> that step's end), one that arrived to an
idle engine waits only for the pipe to the engine core and its wake-up. Two clients' TTFT differing on one server
is explained here: their requests meet the engine's steps differently.

and per token, delivery = the client's arrival of the token - its emission. A token's client gap minus its
server gap is the change in delivery between two tokens: how far the client's ITL is from the engine's. A server
on another host has another clock: nothing is split then (the URL must be a loopback address).
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

import numpy as np

from roseprof.workload.steplog import StepLogRecords

QUANTILES = (50, 99)


def on_this_host(url: str) -> bool:
    """Whether the URL names this machine (a loopback address, or a name that resolves only to loopback)."""
    host = urlsplit(url if "://" in url else f"http://{url}").hostname or ""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(i[4][0]).is_loopback for i in infos)


def http_path(
    log: StepLogRecords, tokens: list[dict], start_monotonic_ns: int | None, url: str
) -> dict | None:
    """The `path` part of a live run: quantiles (ms) of HTTP in, engine TTFT, first-token delivery, every
    token's delivery and |client gap - server gap|, over the requests both sides hold. None where the two clocks
    are not one (another host, no monotonic start) or no request joins."""
    if start_monotonic_ns is None or not on_this_host(url):
        return None
    first = log.first_step
    by_id = {r.get("request_id"): r for r in log.requests if r.get("request_id")}
    http_in, engine, first_delivery, delivery, gap_diff = [], [], [], [], []
    queue, prefill, step_wait, busy = [], [], [], 0
    first_prefill = _first_prefill_start(log)
    names_known = any(p.get("requests") for p in log.prefills)  # older engines' prefill records name none
    busy_until = _BusyAt(log)
    for row in tokens:
        rec = by_id.get(row["request_id"])
        if rec is None or row["sent_ms"] is None or not row["t_ms"]:
            continue
        sent_ns = start_monotonic_ns + row["sent_ms"] * 1e6
        # The window holds the request's first prefill (not only a readmission after a preemption, whose token is
        # a -1 too): its first token is a -1 and the window's prefills name it (in a log whose prefills name no
        # request, its first -1 is taken for it).
        steps_of = rec["token_step"]
        holds_prefill = (
            bool(steps_of) and steps_of[0] == -1 and (rec["id"] in first_prefill or not names_known)
        )
        # the server's emissions by step (the window renumbers steps from `first`); -1: the prefills, in order
        emitted = dict(zip(steps_of, rec["token_ns"]))
        prefills = [at for step, at in zip(steps_of, rec["token_ns"]) if step == -1]
        first_at = prefills[0] if holds_prefill else None  # the first token's emission
        readmissions = iter(prefills[1:] if holds_prefill else prefills)
        pairs = []  # (client ns, server ns) of the tokens both sides have
        for i, (t_ms, step) in enumerate(zip(row["t_ms"], row["steps"])):
            if i == 0 and (step is None or step < 0):  # the first prefill's token, its step said or not
                at = first_at
            elif step is None:
                continue
            elif step < 0:  # a readmission's token: the next of the window's other prefills
                at = next(readmissions, None)
            else:
                at = emitted.get(step - first)
            if at is not None:
                pairs.append((start_monotonic_ns + t_ms * 1e6, at))
        http_in.append(rec["arrival_ns"] - sent_ns)
        # The client's first token is the prefill's and the window still holds its emission (a prefill older
        # than the window's first step is cut from it: the first pair is then a later token's).
        first_is_prefill = row["steps"][0] is not None and row["steps"][0] < 0
        prefill_at = first_at if first_is_prefill else None
        if prefill_at is not None and start_monotonic_ns + row["t_ms"][0] * 1e6 < prefill_at:
            prefill_at = (
                None  # emitted after the client had it: a readmission's, in a log that could not tell
            )
        if prefill_at is not None:
            engine.append(prefill_at - rec["arrival_ns"])
            first_delivery.append(start_monotonic_ns + row["t_ms"][0] * 1e6 - prefill_at)
            start = first_prefill.get(rec["id"])
            if start is not None and start >= rec["arrival_ns"]:
                queue.append(start - rec["arrival_ns"])
                prefill.append(prefill_at - start)
                end = busy_until(rec["arrival_ns"])
                if end is not None:
                    busy += 1
                    step_wait.append(end - rec["arrival_ns"])
        delivery += [c - s for c, s in pairs]
        gap_diff += [abs((c1 - c0) - (s1 - s0)) for (c0, s0), (c1, s1) in zip(pairs, pairs[1:])]
    if not http_in:
        return None
    out = {
        "requests": len(http_in),
        "tokens": len(delivery),
        "http_in_ms": _quantiles(http_in),
        "engine_ttft_ms": _quantiles(engine),
        "queue_ms": _quantiles(queue),
        "prefill_ms": _quantiles(prefill),
        # of the requests split into queue and prefill: how many arrived while a step or prefill ran, and how
        # long they had left to wait for it
        "busy_at_arrival": busy / len(queue) if queue else None,
        "step_wait_ms": _quantiles(step_wait),
        "first_delivery_ms": _quantiles(first_delivery),
        "delivery_ms": _quantiles(delivery),
        "gap_diff_ms": _quantiles(gap_diff),
    }
    # Two clocks that are not one (a container with its own time namespace) give deliveries far below zero.
    out["clocks_agree"] = not delivery or float(np.percentile(delivery, 1)) > -1e6
    return out


def _first_prefill_start(log: StepLogRecords) -> dict[int, int]:
    """Each request's first prefill (not a readmission after a preemption): when it started, by engine id."""
    out: dict[int, int] = {}
    for p in sorted(log.prefills, key=lambda p: p["start_ns"]):
        readmitted = set(p["readmitted"])
        for ident in p["requests"]:
            if ident not in readmitted:
                out.setdefault(ident, p["start_ns"])
    return out


class _BusyAt:
    """Whether the engine ran a step or a prefill at a moment: the end of the one running then, else None."""

    def __init__(self, log: StepLogRecords) -> None:
        spans = sorted((r["start_ns"], r["end_ns"]) for r in [*log.steps, *log.prefills])
        self.starts = np.asarray([s for s, _ in spans], dtype=np.int64)
        # the latest end of the spans started so far (a prefill may run inside a step's range)
        self.ends = (
            np.maximum.accumulate(np.asarray([e for _, e in spans], dtype=np.int64)) if spans else None
        )

    def __call__(self, t_ns: int) -> int | None:
        i = int(np.searchsorted(self.starts, t_ns, side="right")) - 1  # the last span started at or before t
        if i < 0 or self.ends is None or self.ends[i] <= t_ns:
            return None
        return int(self.ends[i])


def _quantiles(values_ns: list[float]) -> dict:
    if not values_ns:
        return {f"p{q}": None for q in QUANTILES}
    a = np.asarray(values_ns, dtype=np.float64) / 1e6
    return {f"p{q}": float(np.percentile(a, q)) for q in QUANTILES}
