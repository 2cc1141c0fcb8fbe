"""The bridge between the event loop (HTTP) and the engine core, whose step loop runs in a process of its own
(engine_core.py says why, and the protocol).

The event loop sends adds and aborts down the pipe; a reader thread waits on the core's events and hands each
batch to the event loop (one `call_soon_threadsafe`; a blocking read on the loop itself is not safe, an event
loop may make the pipe non-blocking): a step's tokens are appended to each job's pending tokens and its writer
woken. A slow client
therefore gets several tokens in its next chunk instead of slowing the engine, which never waits on the server.

States: starting (building the engine) -> ready -> draining (no new requests) -> stopped; or failed (the engine
raised or its process died: every open request gets the error, and the server exits non-zero).
"""

from __future__ import annotations

import asyncio
import itertools
import multiprocessing
import threading
from dataclasses import dataclass, field

from roseinfer import tracing
from roseinfer.config import EngineConfig
from roseinfer.sequence import SamplingParams

STARTING, READY, DRAINING, STOPPED, FAILED = "starting", "ready", "draining", "stopped", "failed"


@dataclass
class Choice:
    """One prompt of a job: the tokens the engine has emitted for it and not yet written, and how it ended."""

    prompt_ids: list[int]
    new_ids: list[int] = field(default_factory=list)
    new_steps: list[int] = field(default_factory=list)  # the decode step of each token (-1: its prefill)
    num_generated: int = 0
    finish_reason: str | None = None


class Job:
    """One HTTP request: one or more prompts (choices) sharing sampling parameters and a request id."""

    def __init__(self, request_id: str, prompts: list[list[int]], params: SamplingParams) -> None:
        self.id = request_id
        self.key = 0  # the bridge's number for it on the pipe
        self.params = params
        self.choices = [Choice(ids) for ids in prompts]
        self.arrival_ns = tracing.now_ns()
        self.event = asyncio.Event()  # set when tokens, a finish or an error arrive
        self.error: str | None = None

    @property
    def done(self) -> bool:
        return self.error is not None or all(c.finish_reason is not None for c in self.choices)


class EngineBridge:
    def __init__(
        self, model: str, cfg: EngineConfig, metrics: bool, loop: asyncio.AbstractEventLoop, slo=None
    ) -> None:
        self.model, self.cfg, self.metrics = model, cfg, metrics
        self.slo = slo  # slo_capture.CaptureSpec (--capture-on), for the core; None: off
        self.loop = loop
        self.state = STARTING
        self.failure: str | None = None
        self.built = False  # the core built its engine (a failure after this is a serving failure, exit 1)
        self.ready = asyncio.Event()  # set when the engine is built, or failed to be
        self.finished = asyncio.Event()  # set when the core process has ended
        self.jobs: set[Job] = set()  # open jobs (answers not yet written)
        self._by_key: dict[int, Job] = {}  # jobs the core holds sequences of
        self._keys = itertools.count(1)
        self._queries: dict[int, asyncio.Future] = {}
        self._qids = itertools.count(1)
        self._adds_sent = 0
        self._adds_taken = 0  # by the core, as its last event said
        self._core_waiting = 0  # requests the core's scheduler holds, as its last event said
        self._heard_ns = 0  # when the core last said something, or was given work while idle
        self._stopping = False
        self.proc = None
        self._conn = None

    # -- lifetime ------------------------------------------------------------------------------------------------
    def start(self) -> None:
        from roseinfer.serve import engine_core

        ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(
            target=engine_core.main,
            args=(child, self.model, self.cfg, self.metrics, self.slo),
            name="roseinfer-engine-core",
        )
        self.proc.start()
        child.close()
        threading.Thread(target=self._read, name="roseinfer-core-reader", daemon=True).start()

    def drain(self) -> None:
        if self.state == READY:
            self.state = DRAINING

    def stop(self) -> None:
        """Abort what is open and tell the core to leave (call after draining)."""
        if self._stopping:
            return
        self._stopping = True
        for job in list(self.jobs):
            self.abort(job)
        self._send(("stop",))

    async def wait_stopped(self, timeout_s: float) -> None:
        """Until the core process has exited; kill it past `timeout_s` (it then leaves its ranks to their own
        watchdogs)."""
        proc = self.proc
        if proc is None:
            return
        await self.loop.run_in_executor(None, proc.join, timeout_s)
        if proc.is_alive():
            proc.kill()
            await self.loop.run_in_executor(None, proc.join, 10)

    # -- requests (event loop) -----------------------------------------------------------------------------------
    def submit(self, job: Job) -> None:
        job.key = next(self._keys)
        if not self._by_key:
            self._heard_ns = tracing.now_ns()  # the core was idle: a stall counts from now
        self.jobs.add(job)
        self._by_key[job.key] = job
        self._adds_sent += 1
        self._send(("add", job.key, job.id, [c.prompt_ids for c in job.choices], job.params, job.arrival_ns))

    def abort(self, job: Job, index: int | None = None, reason: str = "abort") -> None:
        """The client went away (or timed out), or a stop string ended choice `index`: its sequences (that one
        only, with an index) leave the engine at the next step."""
        if index is None:
            self.jobs.discard(job)
        if not job.done and job.key in self._by_key:
            self._send(("abort", job.key, index, reason))

    def release(self, job: Job) -> None:
        """The job's answer is written."""
        self.jobs.discard(job)

    def num_waiting(self) -> int:
        """Requests not yet in the running batch: in the core's queue, or sent and not yet taken in."""
        return self._core_waiting + self.num_submitted_not_added()

    def num_submitted_not_added(self) -> int:
        return self._adds_sent - self._adds_taken

    def stalled_s(self) -> float:
        """Seconds the core has been silent while holding work (0 when it holds none): a step that runs this
        long is a hung collective or device."""
        if not self._by_key or self.state != READY:
            return 0.0
        return (tracing.now_ns() - self._heard_ns) / 1e9

    async def query(self, what: str, timeout_s: float = 10.0):
        """Ask the core (answered between two steps); None when it cannot answer."""
        if self.state not in (READY, DRAINING):
            return None
        qid = next(self._qids)
        future = self.loop.create_future()
        self._queries[qid] = future
        self._send(("query", qid, what))
        try:
            return await asyncio.wait_for(future, timeout_s)
        except asyncio.TimeoutError:
            return None
        finally:
            self._queries.pop(qid, None)

    def _send(self, command: tuple) -> None:
        if self._conn is None or self.state in (FAILED, STOPPED):
            return
        try:
            self._conn.send(command)
        except (OSError, ValueError):
            pass  # the core is gone; its EOF ends the bridge

    # -- the core's events ----------------------------------------------------------------------------------------
    def _read(self) -> None:
        """The reader thread: each batch of events to the event loop, then the end of the pipe."""
        call = self.loop.call_soon_threadsafe
        while True:
            try:
                events = self._conn.recv()
            except (EOFError, OSError):
                break
            call(self._on_events, events)
        self.proc.join(10)  # the pipe closes as the process exits: its exit status follows
        call(self._core_ended)

    def _on_events(self, events: list[tuple]) -> None:
        self._heard_ns = tracing.now_ns()
        by_key = self._by_key
        for event in events:
            kind = event[0]
            if kind == "step":
                _, tokens, finishes, self._core_waiting, self._adds_taken = event
                for key, index, tok, step in tokens:
                    job = by_key.get(key)
                    if job is not None:
                        choice = job.choices[index]
                        choice.new_ids.append(tok)
                        choice.new_steps.append(step)
                        job.event.set()
                for key, index, reason in finishes:
                    job = by_key.get(key)
                    if job is not None:
                        job.choices[index].finish_reason = reason
                        job.event.set()
                        if all(c.finish_reason is not None for c in job.choices):
                            del by_key[key]
            elif kind == "reply":
                future = self._queries.get(event[1])
                if future is not None and not future.done():
                    future.set_result(event[2])
            elif kind == "ready":
                self.built = True
                self.state = READY
                self.ready.set()
            elif kind == "failed":
                self.built = event[2]
                self._fail(event[1])

    def _core_ended(self) -> None:
        self._conn.close()
        if self.state != FAILED:
            if self._stopping:
                self.state = STOPPED
            else:
                code = self.proc.exitcode
                how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
                self._fail(f"engine failed: its process ended unexpectedly ({how})")
        self.ready.set()
        self.finished.set()

    def _fail(self, message: str) -> None:
        self.state = FAILED
        self.failure = message
        for job in list(self.jobs):
            job.error = message
            job.event.set()
        for future in self._queries.values():
            if not future.done():
                future.set_result(None)
        self.ready.set()
