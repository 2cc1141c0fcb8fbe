"""The bridge between the event loop (HTTP) and the engine, whose step loop runs on its own thread.

The engine thread never waits on HTTP work: it takes new requests and aborts from a deque between steps, steps,
and hands each step's tokens to the event loop with one `call_soon_threadsafe`. The event loop side only appends
to a job's pending tokens and wakes its writer; a slow client therefore gets several tokens in its next chunk
instead of slowing the engine. Client reads, JSON and SSE writes all happen on the event loop.

States: starting (building the engine) -> ready -> draining (no new requests) -> stopped; or failed (the engine
raised: every open request gets the error, and the server exits non-zero).
"""

from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from roseinfer import tracing
from roseinfer.sequence import SamplingParams, Sequence
from roseinfer.serve.metrics import ServerMetrics

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
        self.params = params
        self.choices = [Choice(ids) for ids in prompts]
        self.arrival_ns = tracing.now_ns()
        self.event = asyncio.Event()  # set when tokens, a finish or an error arrive
        self.error: str | None = None
        self.seqs: list[Sequence] = []  # set on the engine thread when added

    @property
    def done(self) -> bool:
        return self.error is not None or all(c.finish_reason is not None for c in self.choices)


class EngineBridge:
    def __init__(
        self,
        build_engine: Callable[[], tuple[object, object, Callable[[], None]]],
        metrics: ServerMetrics | None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        self._build_engine = build_engine
        self.metrics = metrics
        self.loop = loop
        self.engine = None
        self.workers = None  # tensor parallelism: ranks 1..N-1 (roseinfer.workers.Workers), told every step
        self._ops: list[tuple] = []  # with workers: the adds and aborts applied since the last step, in order
        self.state = STARTING
        self.failure: str | None = None
        self.ready = asyncio.Event()  # set (on the loop) when the engine is built, or failed to be
        self.finished = asyncio.Event()  # set when the engine thread has ended
        self.jobs: set[Job] = set()  # open jobs (event loop side)
        self._commands: collections.deque = (
            collections.deque()
        )  # ("add" | "abort", job), appended by the loop
        self._wake = threading.Event()
        self._stop = False
        self._owner: dict[int, tuple[Job, Choice]] = {}  # engine sequence id -> its job and choice
        self._prefill_start: dict[int, int] = {}  # sequence id -> start of the step that prefilled it
        self._emitted: list[tuple[Sequence, int, int]] = []  # (sequence, token, step) of the step running
        # The step running: its start (0 when none). /health reports a step that has run for too long (a hung
        # collective or device) as a stalled engine.
        self.step_started_ns = 0
        self._close: Callable[[], None] = lambda: None  # stops the ranks the engine's builder started
        self._thread = threading.Thread(target=self._run, name="roseinfer-engine", daemon=True)

    # -- event loop side -----------------------------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job) -> None:
        self.jobs.add(job)
        self._commands.append(("add", job))  # ("add", job) | ("abort", job, choice index or None, reason)
        self._wake.set()

    def abort(self, job: Job, index: int | None = None, reason: str = "abort") -> None:
        """The client went away (or timed out), or a stop string ended choice `index`: its sequences (that one
        only, with an index) leave the engine at the next step."""
        if index is None:
            self.jobs.discard(job)
        if not job.done:
            self._commands.append(("abort", job, index, reason))
            self._wake.set()

    def release(self, job: Job) -> None:
        """The job's answer is written."""
        self.jobs.discard(job)

    def num_submitted_not_added(self) -> int:
        return sum(len(c[1].choices) for c in list(self._commands) if c[0] == "add")

    def num_waiting(self) -> int:
        engine = self.engine
        return (len(engine.scheduler.waiting) if engine is not None else 0) + self.num_submitted_not_added()

    def stalled_s(self) -> float:
        """Seconds the step now running has taken (0 when none runs)."""
        started = self.step_started_ns
        return (tracing.now_ns() - started) / 1e9 if started else 0.0

    def drain(self) -> None:
        if self.state == READY:
            self.state = DRAINING

    def stop(self) -> None:
        """End the engine thread once its open requests are aborted (call after draining)."""
        for job in list(self.jobs):
            self.abort(job)
        self._stop = True
        self._wake.set()

    def _deliver(
        self, tokens: list[tuple[Job, Choice, int, int]], finishes: list[tuple[Job, Choice, str]]
    ) -> None:
        for job, choice, tok, step in tokens:
            choice.new_ids.append(tok)
            choice.new_steps.append(step)
            job.event.set()
        for job, choice, reason in finishes:
            choice.finish_reason = reason
            job.event.set()

    def _set_ready(self) -> None:
        self.ready.set()

    def _fail(self, message: str) -> None:
        self.state = FAILED
        self.failure = message
        for job in list(self.jobs):
            job.error = message
            job.event.set()
        self.ready.set()

    def _thread_ended(self) -> None:
        if self.state != FAILED:
            self.state = STOPPED
        self.finished.set()

    # -- engine thread -------------------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            engine, self.workers, self._close = self._build_engine()
            self.engine = engine
            engine.on_token = self._on_token
            self.state = READY
            self.loop.call_soon_threadsafe(self._set_ready)
            while True:
                self._apply_commands()
                if self._stop and not engine.has_unfinished():
                    break
                if not engine.has_unfinished():
                    if engine.steplog is not None:
                        engine.steplog.flush()  # idle: readers of the step log see every finished request
                    self._wake.wait()
                    self._wake.clear()
                    continue
                if self.workers is not None:
                    self.workers.send_step(self._ops)
                    self._ops = []
                start_ns = self.step_started_ns = tracing.now_ns()
                finished = engine.step()
                self.step_started_ns = 0
                self._publish(start_ns, finished)
        except BaseException as e:  # noqa: BLE001 - every open request is told, in one line
            what = "engine failed" if self.engine is not None else "cannot build the engine"
            message = f"{what}: {type(e).__name__}: {e}".splitlines()[0]
            self.loop.call_soon_threadsafe(self._fail, message)
        finally:
            if self.engine is not None and self.engine.steplog is not None:
                self.engine.steplog.flush()
            try:
                self._close()  # no rank process left behind, however the loop ended
            except Exception:  # noqa: BLE001 - already failing or stopping; the ranks are killed if stuck
                pass
            self.loop.call_soon_threadsafe(self._thread_ended)

    def _on_token(self, seq: Sequence, tok: int) -> None:
        self._emitted.append((seq, tok, seq.token_step[-1]))

    def _apply_commands(self) -> None:
        engine = self.engine
        while self._commands:
            kind, job, *abort_args = self._commands.popleft()
            if kind == "add":
                for choice in job.choices:
                    seq = engine.add_request(choice.prompt_ids, job.params, job.arrival_ns, request_id=job.id)
                    job.seqs.append(seq)
                    if self.workers is not None:
                        self._ops.append(("add", choice.prompt_ids, job.params, job.id))
                    self._owner[seq.id] = (job, choice)
            else:
                index, reason = abort_args
                finishes = []
                for seq in job.seqs if index is None else job.seqs[index : index + 1]:
                    if seq.id in self._owner:
                        engine.abort(seq, reason)
                        if self.workers is not None:
                            self._ops.append(("abort", seq.id, reason))
                        finishes.append(self._forget(seq))
                if finishes:
                    self.loop.call_soon_threadsafe(self._deliver, [], finishes)

    def _forget(self, seq: Sequence) -> tuple[Job, Choice, str]:
        job, choice = self._owner.pop(seq.id)
        prefill_start = self._prefill_start.pop(seq.id, None)
        if self.metrics is not None:
            self.metrics.request_finished(seq, prefill_start)
        return job, choice, seq.finish_reason

    def _publish(self, start_ns: int, finished: list[Sequence]) -> None:
        """Hand one step's tokens and finishes to the event loop (one call), and count the step."""
        emitted, self._emitted = self._emitted, []
        owner = self._owner
        tokens = []
        for seq, tok, step in emitted:
            job, choice = owner[seq.id]
            tokens.append((job, choice, tok, step))
            if step < 0:
                self._prefill_start[seq.id] = start_ns
        metrics = self.metrics
        if metrics is not None:
            end_ns = tracing.now_ns()
            metrics.step.observe((end_ns - start_ns) / 1e9)
            metrics.generation_tokens += len(emitted)
            block_size = self.engine.cfg.block_size
            prefilled = 0
            for seq, _, step in emitted:
                if step < 0 and len(seq.output_ids) == 1:  # admitted (not a readmission after preemption)
                    metrics.prompt_tokens += len(seq.prompt_ids)
                    metrics.prefix_queries_tokens += len(seq.prompt_ids) // block_size * block_size
                    prefilled += len(seq.prompt_ids)
            # As vLLM's: the tokens the iteration computed, its prefills' prompt tokens and its generated ones.
            metrics.iteration_tokens.observe(len(emitted) + prefilled)
        finishes = [self._forget(seq) for seq in finished]
        if tokens or finishes:
            self.loop.call_soon_threadsafe(self._deliver, tokens, finishes)
