"""The load's driver: one asyncio loop sends the plan's requests (open loop: each at its due time, however many
are in flight; closed loop: C at a time), scrapes the server's /metrics every second where it has one, and tells
a progress callback how it goes. Everything lands in a `LoadState` the caller owns, so a load stopped by Ctrl-C
or a fault still has every request done so far."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from roseprof.errors import RoseprofError
from roseprof.load import metrics_scrape
from roseprof.load.client import Endpoint, Record, clock, get, stream_completion
from roseprof.load.schedule import Plan, Planned


@dataclass
class LoadOptions:
    stall_s: float = 30.0  # no byte for this long: the request failed (timeout)
    limit_s: float | None = None  # a request's whole time limit (None: none)
    ignore_eos: bool = True
    model: str | None = None  # None: the server's first model (/v1/models)
    scrape: bool = True
    scrape_interval_s: float = 1.0


@dataclass
class LoadState:
    """What a load has done so far (the caller's: kept when the load is interrupted)."""

    start: float | None = None
    start_monotonic_ns: int | None = None  # time.monotonic_ns() at `start`: the server's clock (live/path.py)
    records: list[Record] = field(default_factory=list)
    model: str | None = None
    metrics: list[dict] = field(default_factory=list)  # [{"t_ms", "samples": {series: value}}]
    loop_lags_ms: list[float] = field(
        default_factory=list
    )  # the client loop's late wake-ups over LAG_NOTED_MS
    metrics_url: str | None = None
    stopped: str | None = None  # why the load stopped early
    refused_in_a_row: int = 0
    # requests that have ended with a token, and those sent and not ended: _report's early report waits for both
    answered: int = 0
    active: int = 0

    def done(self) -> list[Record]:
        return [r for r in self.records if r.end is not None]

    def live(self) -> dict:
        """Live figures for the progress bar: sent, done, in flight, rate achieved, TTFT and ITL so far."""
        now = clock()
        done = self.done()
        sent = [r for r in self.records if r.sent is not None]
        ttft = [1e3 * (r.first - r.sent) for r in done if r.first is not None and r.sent is not None]
        elapsed = now - self.start if self.start else 0.0
        return {
            "elapsed_s": elapsed,
            "sent": len(sent),
            "done": len(done),
            "errors": sum(1 for r in done if r.status == "error"),
            "in_flight": len(sent) - len([r for r in sent if r.end is not None]),
            "rate": len(sent) / elapsed if elapsed > 0 else 0.0,
            "ttft_p50_ms": float(np.percentile(ttft, 50)) if ttft else None,
            "ttft_p99_ms": float(np.percentile(ttft, 99)) if ttft else None,
        }


def body_of(p: Planned, model: str | None, ignore_eos: bool) -> dict:
    body = {"prompt": p.prompt, "max_tokens": p.max_tokens, "stream": True, "temperature": 0}
    if model:
        body["model"] = model
    if ignore_eos:
        body["ignore_eos"] = True  # vLLM and SGLang take it too; output lengths are then what was asked
    return body


async def preflight(ep: Endpoint, state: LoadState, opts: LoadOptions) -> None:
    """Reach the server once before the clock starts: the model it serves (unless given), whether it has
    /metrics. An unreachable URL is one line."""
    try:
        status, body = await get(ep, ep.path("/v1/models"), min(opts.stall_s, 10.0))
    except (OSError, asyncio.TimeoutError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else type(e).__name__
        raise RoseprofError(f"cannot reach {ep.url}: {why}") from None
    state.model = opts.model
    if state.model is None and status == 200:
        try:
            data = json.loads(body)["data"]
            state.model = str(data[0]["id"]) if data else None
        except (ValueError, KeyError, TypeError, IndexError):
            state.model = None
    if status in (401, 403) and not ep.api_key:
        raise RoseprofError(f"{ep.url} refuses requests without a key (HTTP {status}): give --api-key")
    if opts.scrape:
        try:
            status, _ = await get(ep, ep.path("/metrics"), 5.0)
            if status == 200:
                state.metrics_url = f"{ep.url.rstrip('/')}/metrics"
        except (OSError, asyncio.TimeoutError):
            pass


async def _scraper(ep: Endpoint, state: LoadState, interval: float) -> None:
    while True:
        await scrape_once(ep, state)
        await asyncio.sleep(interval)


async def scrape_once(ep: Endpoint, state: LoadState) -> None:
    t = clock()
    try:
        status, body = await get(ep, ep.path("/metrics"), 5.0)
    except (OSError, asyncio.TimeoutError):
        return
    if status == 200:
        # kept as text, parsed once the load is over (`_parse_scrapes`): parsing a /metrics page on the event loop
        # while tokens stream in delays their stamps
        state.metrics.append({"t_ms": 1e3 * (t - state.start), "text": body})


def _parse_scrapes(state: LoadState) -> None:
    for scrape in state.metrics:
        if "text" in scrape:
            scrape["samples"] = metrics_scrape.parse(scrape.pop("text").decode("utf-8", "replace"))


def run_loop(coro):
    """Run the load's coroutine on uvloop where it is installed (roseinfer's server requires it), else on asyncio's
    own loop; ROSEPROF_LOAD_LOOP=asyncio picks asyncio's (to measure one against the other). A read is stamped when
    the event loop gets to it, so the loop's own cost per read is in every token's time: uvloop's I/O path costs a
    fraction of asyncio's (docs/BENCHMARKS.md, session 21)."""
    try:
        import uvloop
    except ImportError:
        uvloop = None
    if uvloop is None or os.environ.get("ROSEPROF_LOAD_LOOP") == "asyncio":
        return asyncio.run(coro)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as loop_runner:
        return loop_runner.run(coro)


async def run(
    ep: Endpoint,
    plan: Plan,
    opts: LoadOptions,
    state: LoadState,
    progress: Callable[[dict], None] | None = None,
) -> None:
    """Run the load into `state`. Returns when every request sent has ended (each ends by its own timeouts)."""
    await preflight(ep, state, opts)
    # numpy imports its quantile code at the first call (40-50 ms): never inside the load, where it stalled the
    # client's event loop and delayed every token in flight (docs/BENCHMARKS.md, session 19)
    np.percentile(np.zeros(1), [50, 99])
    state.start = clock()
    state.start_monotonic_ns = time.monotonic_ns()
    side: list[asyncio.Task] = []
    if state.metrics_url:
        await scrape_once(ep, state)  # before
        side.append(asyncio.create_task(_scraper(ep, state, opts.scrape_interval_s)))
    if progress is not None:
        side.append(asyncio.create_task(_report(state, progress)))
    side.append(asyncio.create_task(_watch_loop(state)))
    deadline = None if plan.duration_s is None else state.start + plan.duration_s
    try:
        if plan.rate is not None:
            await _open_loop(ep, plan, opts, state, deadline)
        else:
            await _closed_loop(ep, plan, opts, state, deadline)
    finally:
        for task in side:
            task.cancel()
        await asyncio.gather(*side, return_exceptions=True)
        _parse_scrapes(state)  # a load stopped (Ctrl-C) keeps its scrapes, parsed
    if state.metrics_url:
        await scrape_once(ep, state)  # after
    _parse_scrapes(state)
    if progress is not None:
        progress(state.live())


# The client's own event loop: a wake-up this late (ms) is noted. Every token read while the loop was stalled is
# stamped late by up to the stall, so a load says how long its own loop stalled (the generator is not the server).
LAG_NOTED_MS = 5.0
LAG_TICK_S = 0.005


async def _watch_loop(state: LoadState) -> None:
    """Sleeps LAG_TICK_S again and again; a wake-up later than LAG_NOTED_MS past due is the loop's stall."""
    while True:
        due = clock() + LAG_TICK_S
        await asyncio.sleep(LAG_TICK_S)
        late_ms = 1e3 * (clock() - due)
        if late_ms > LAG_NOTED_MS:
            state.loop_lags_ms.append(late_ms)


# The progress reports' period, and how often the load looks for the early report's moment until it has made it.
REPORT_S = 0.5
FIRST_POLL_S = 0.01


async def _report(state: LoadState, progress) -> None:
    """Reports every REPORT_S, and once more as soon as a request has ended with a token (a TTFT to report; a
    refused one has none) while others are in flight. `roseprof live` opens its window on the first report with
    both: on the ticks alone, a load shorter than the period (12 requests of 32 tokens took 0.41 s on a faster
    machine, docs/BENCHMARKS.md session 33) ended before any such report and opened none; and a closed loop's first
    requests end together, the next ones sent a millisecond later, so a report in that gap had none in flight (a
    clean-clone CI run's 0.37 s load opened none so)."""
    waiting = True  # for a report with a TTFT and requests in flight
    due = clock() + REPORT_S
    while True:
        await asyncio.sleep(min(FIRST_POLL_S, due - clock()) if waiting else max(due - clock(), 0.0))
        if waiting and state.answered and state.active:
            figures = state.live()
            if figures["in_flight"] and figures["ttft_p50_ms"] is not None:
                waiting = False
                progress(figures)
        if clock() >= due:
            due = clock() + REPORT_S
            progress(state.live())


async def _send(ep: Endpoint, p: Planned, opts: LoadOptions, state: LoadState, due: float | None) -> None:
    rec = Record(p.index, p.prompt_len, p.max_tokens, due=due)
    state.records.append(rec)
    state.active += 1
    try:
        await stream_completion(ep, rec, body_of(p, state.model, opts.ignore_eos), opts.stall_s, opts.limit_s)
    finally:
        state.active -= 1
    if rec.first is not None:
        state.answered += 1
    state.refused_in_a_row = state.refused_in_a_row + 1 if rec.error == "connect" else 0


async def _open_loop(ep, plan: Plan, opts, state: LoadState, deadline) -> None:
    tasks: set[asyncio.Task] = set()
    try:
        for p in plan.schedule():
            due = state.start + p.at_s
            if deadline is not None and due >= deadline:
                break
            wait = due - clock()
            if wait > 0:
                await asyncio.sleep(wait)
            task = asyncio.create_task(_send(ep, p, opts, state, due))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            if _all_refused(state):
                break
        if tasks:
            await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


async def _closed_loop(ep, plan: Plan, opts, state: LoadState, deadline) -> None:
    schedule = plan.schedule()

    async def worker() -> None:
        for p in schedule:  # one iterator shared by every worker: each request taken once
            if deadline is not None and clock() >= deadline or _all_refused(state):
                return
            await _send(ep, p, opts, state, None)

    workers = [asyncio.create_task(worker()) for _ in range(plan.concurrency)]
    try:
        await asyncio.gather(*workers)
    finally:
        for w in workers:
            w.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


# A server that went away mid-run: after this many requests in a row were refused a connection, stop sending.
REFUSED_IN_A_ROW = 20


def _all_refused(state: LoadState) -> bool:
    if state.refused_in_a_row >= REFUSED_IN_A_ROW:
        state.stopped = f"the server stopped answering ({REFUSED_IN_A_ROW} connections in a row refused)"
        return True
    return False
