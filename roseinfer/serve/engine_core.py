"""The engine core: the engine's step loop in a process of its own, behind a pipe (as vLLM's engine core).

Why a process: with the loop on a thread of the HTTP process, the HTTP side's Python (SSE chunks, JSON,
detokenizing) took the GIL from the loop. 64 streams on an H200 made each engine step 2.7x slower than the same
step offline, and the server delivered 0.38x the offline engine's tokens/s (docs/BENCHMARKS.md, session 18).
Here the loop holds its process' GIL alone, but for the thread that writes its events to the pipe.

The protocol (pickled tuples over a `multiprocessing` pipe; `key` is the server's integer for one HTTP request):
  server -> core:  ("add", key, request_id, prompts, params, arrival_ns)   one request's prompts (its choices)
                   ("abort", key, index or None, reason)                   one choice, or all of the request's
                   ("query", qid, what)                                    "metrics": a metrics snapshot;
                                                                           ("steps", last): the flight recorder's
                                                                           records (None when it is off);
                                                                           ("profile", op, ..., folder): a capture
                                                                           window (windows.py)
                   ("stop",)                                               leave once nothing is in the engine
  core -> server:  lists of events, one send per batch (the writer thread batches while the pipe is busy):
                   ("ready",)
                   ("step", tokens, finishes, waiting, added)   one a step, and one before it in a step that
                                                                prefilled (the prefill's first tokens, no
                                                                finishes); tokens: (key, index, token, decode step or -1);
                                                                finishes: (key, index, reason); waiting: requests
                                                                the scheduler holds; added: adds taken in so far
                   ("reply", qid, value)
                   ("failed", message, built)                   then the process exits 1
An EOF on the server's end is the server gone: the core aborts what it holds and exits.
"""

from __future__ import annotations

import collections
import dataclasses
import signal
import sys
import threading
import time
from multiprocessing.connection import Connection

from roseinfer import tracing
from roseinfer.config import EngineConfig
from roseinfer.frozen_heap import freeze_startup_heap
from roseinfer.sequence import Sequence


def build_engine(model: str, cfg: EngineConfig):
    """(rank 0's engine, the other ranks' Workers or None, a function that stops them). With tensor parallelism
    `LLM` starts the ranks as it does for `generate`; the core then tells them each step's adds and aborts."""
    if cfg.tensor_parallel_size == 1:
        from roseinfer.engine import Engine

        return Engine(model, cfg), None, lambda: None
    from roseinfer.llm import LLM

    options = dataclasses.asdict(cfg)
    llm = LLM(model, device=options.pop("device"), **options)
    return llm.engine, llm.workers, llm.close


class Outbox:
    """Events to the server, written by a thread of their own: a server that reads slowly fills the pipe and
    blocks this thread, never the step loop; events that pile up meanwhile leave in one send."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._pending: collections.deque = collections.deque()
        self._ready = threading.Condition()
        self._closing = False
        self._thread = threading.Thread(target=self._write, name="roseinfer-core-outbox", daemon=True)
        self._thread.start()

    def put(self, event: tuple) -> None:
        with self._ready:
            self._pending.append(event)
            self._ready.notify()

    def close(self, timeout_s: float = 10.0) -> None:
        """Write what is pending, then stop."""
        with self._ready:
            self._closing = True
            self._ready.notify()
        self._thread.join(timeout_s)

    def _write(self) -> None:
        pending = self._pending
        while True:
            with self._ready:
                while not pending and not self._closing:
                    self._ready.wait()
                if not pending and self._closing:
                    return
                batch = list(pending)
                pending.clear()
            try:
                self.conn.send(batch)
            except (OSError, ValueError):  # the server is gone; the loop sees the EOF and leaves
                return


class EngineCore:
    def __init__(
        self,
        conn: Connection,
        model: str,
        cfg: EngineConfig,
        metrics: bool,
        slo=None,
        freeze_heap: bool = False,
    ) -> None:
        self.conn = conn
        # In the core's own process (`main`): the start-up's objects frozen once the engine is built
        # (roseinfer.frozen_heap); tests that run a core in a thread of theirs leave their process's heap alone
        self.freeze_heap = freeze_heap
        self.model, self.cfg = model, cfg
        self.out = Outbox(conn)
        self.metrics = None
        if metrics:
            from roseinfer.serve.metrics import ServerMetrics

            self.metrics = ServerMetrics()
        self.slo = None  # --capture-on: slo_capture.SloCapture (its checks run only when it is on)
        if slo is not None:
            from roseinfer.serve.slo_capture import SloCapture

            self.slo = SloCapture(slo)
        self.engine = None
        self.workers = None
        self._ops: list[tuple] = []  # with workers: the adds and aborts applied since the last step, in order
        self._seqs: dict[int, list[Sequence]] = {}  # request key -> its sequences (one per choice)
        self._owner: dict[int, tuple[int, int]] = {}  # sequence id -> (request key, choice index)
        self._prefill_start: dict[int, int] = {}  # sequence id -> start of the step that prefilled it
        # Finished requests whose latencies the metrics have not taken yet: (sequence, its prefill's step start, the
        # Unix time it finished). Taken at the next step's publish, after that step's launch: with the overlapped
        # decode the GPU computes meanwhile, where a finish's own step (a drain, the device idle) would expose them.
        self._unmeasured: list[tuple[Sequence, int | None, float]] = []
        # The step's tokens not sent yet as the "step" event carries them, (key, index, token, step), made as each is
        # emitted: one tuple a token and no second pass (at 64 streams the per-token Python is most of the core's
        # bookkeeping). The prefill's go before the decode's (_publish_prefilled): `_sent` counts those.
        self._step_tokens: list[tuple[int, int, int, int]] = []
        self._sent = 0
        self._emitted: list[tuple[Sequence, int, int]] = []  # (sequence, token, step): only for --capture-on
        self._step_start_ns = 0
        # (tokens computed, prompt tokens if admitted) of the step's prefills
        self._prefilled: list[tuple[int, int]] = []
        self._added = 0  # "add" commands taken in
        self._stopping = False
        self.windows = None  # capture windows (windows.py), made by the first ("profile", ...) query

    def run(self) -> int:
        close = lambda: None  # noqa: E731
        try:
            try:
                engine, self.workers, close = build_engine(self.model, self.cfg)
            except BaseException as e:  # noqa: BLE001 - the server says it in one line and exits 2
                self.out.put(("failed", _one_line("cannot build the engine", e), False))
                return 1
            self.engine = engine
            engine.on_token = self._on_token
            engine.after_prefill = self._publish_prefilled
            if self.freeze_heap:
                freeze_startup_heap()  # before "ready": the first request does not wait for its collection
            self.out.put(("ready",))
            try:
                self._loop()
            except BaseException as e:  # noqa: BLE001 - every open request is told, in one line
                self.out.put(("failed", _one_line("engine failed", e), True))
                return 1
            return 0
        finally:
            if self.engine is not None and self.engine.steplog is not None:
                self.engine.steplog.flush()
            if self.slo is not None:
                self._slo_idle()  # a capture still open is written with the steps there are
                self.slo.close()
            try:
                close()  # no rank process left behind, however the loop ended
            except Exception:  # noqa: BLE001 - already failing or stopping; the ranks are killed if stuck
                pass
            self.out.close()

    def _loop(self) -> None:
        engine = self.engine
        while True:
            if not engine.has_unfinished():
                if self._stopping:
                    return
                if engine.steplog is not None:
                    engine.steplog.flush()  # idle: readers of the step log see every finished request
                if self._unmeasured:
                    self._measure_finished()
                if self.slo is not None:
                    self._slo_idle()
                self.conn.poll(None)  # idle until the server says something (or goes away: EOF)
            self._receive()
            if not engine.has_unfinished():
                continue
            if self.workers is not None:
                self.workers.send_step(self._ops)
                self._ops = []
            self._step_start_ns = start_ns = tracing.now_ns()
            finished = engine.step()
            self._publish(start_ns, finished)
            if self.windows is not None:
                self.windows.after_step(self, start_ns)

    # -- commands ------------------------------------------------------------------------------------------------
    def _receive(self) -> None:
        conn = self.conn
        while conn.poll(0):
            try:
                command = conn.recv()
            except (EOFError, OSError):  # the server is gone: nobody to answer; leave
                self._server_gone()
                return
            kind = command[0]
            if kind == "add":
                self._add(*command[1:])
            elif kind == "abort":
                self._abort(*command[1:])
            elif kind == "query":
                _, qid, what = command
                self.out.put(("reply", qid, self._answer(what)))
            elif kind == "stop":
                self._stopping = True

    def _add(self, key: int, request_id: str, prompts: list[list[int]], params, arrival_ns: int) -> None:
        self._added += 1
        seqs = []
        for index, prompt in enumerate(prompts):
            seq = self.engine.add_request(prompt, params, arrival_ns, request_id=request_id)
            if self.workers is not None:
                self._ops.append(("add", prompt, params, request_id))
            self._owner[seq.id] = (key, index)
            seqs.append(seq)
        self._seqs[key] = seqs

    def _abort(self, key: int, index: int | None, reason: str) -> None:
        seqs = self._seqs.get(key, [])
        finishes = []
        for seq in seqs if index is None else seqs[index : index + 1]:
            if seq.id in self._owner:
                self.engine.abort(seq, reason)
                if self.workers is not None:
                    self._ops.append(("abort", seq.id, reason))
                finishes.append(self._forget(seq))
        if finishes:
            self.out.put(("step", [], finishes, len(self.engine.scheduler.waiting), self._added))

    def _server_gone(self) -> None:
        for key in list(self._seqs):
            self._abort(key, None, "abort")
        self._stopping = True

    def _answer(self, what: str):
        if what == "metrics":
            if self.metrics is None:
                return None
            self._measure_finished()
            return self.metrics.snapshot(self.engine)
        if isinstance(what, tuple) and what[0] == "steps":
            flight = self.engine.flight
            return flight.dump(what[1], self.running()) if flight is not None else None
        if isinstance(what, tuple) and what[0] == "profile":
            if self.windows is None:  # what[-1]: the server's profile folder, sent with every query
                self.windows = self._make_windows(what[-1])
            return self.windows.answer(self, what)
        return None

    def _make_windows(self, folder: str):
        """The capture windows: rank 0's alone, or with tensor parallelism every rank's together."""
        if self.workers is None:
            from roseinfer.serve.windows import Windows

            return Windows(folder)
        from roseinfer.serve.rank_windows import EveryRankWindows

        return EveryRankWindows(folder, self.workers, self.engine.world_size)

    def running(self) -> list[Sequence]:
        """The sequences still in the engine (their request records close a dump of the flight recorder)."""
        return [seq for seqs in self._seqs.values() for seq in seqs if seq.id in self._owner]

    def _slo_idle(self) -> None:
        if self.engine is not None and self.engine.flight is not None:
            self.slo.idle(self.engine.flight, self.running)

    # -- steps ---------------------------------------------------------------------------------------------------
    def _on_token(self, seq: Sequence, tok: int) -> None:
        step = seq.token_step[-1]
        key, index = self._owner[seq.id]
        self._step_tokens.append((key, index, tok, step))
        if self.slo is not None:
            self._emitted.append((seq, tok, step))
        if step < 0:
            self._prefill_start[seq.id] = self._step_start_ns
            if self.slo is not None:
                self.slo.on_prefill_token(seq)  # decode tokens: checked per step (after_step)
            if self.metrics is not None:
                # Prefilled: admitted (its first token) or readmitted after a preemption. Its length now is what
                # the prefill computed (and looked up in the prefix cache) plus this token.
                self._prefilled.append(
                    (seq.num_tokens - 1, len(seq.prompt_ids) if len(seq.output_ids) == 1 else 0)
                )

    def _forget(self, seq: Sequence) -> tuple[int, int, str]:
        key, index = self._owner.pop(seq.id)
        seqs = self._seqs.get(key)
        if seqs is not None and all(s.id not in self._owner for s in seqs):
            del self._seqs[key]
        prefill_start = self._prefill_start.pop(seq.id, None)
        if self.metrics is not None:
            self._unmeasured.append((seq, prefill_start, time.time()))
        return key, index, seq.finish_reason

    def _measure_finished(self) -> None:
        """The finished requests' latencies into the metrics (before a snapshot, when idle, at the next publish)."""
        unmeasured, self._unmeasured = self._unmeasured, []
        for seq, prefill_start, at in unmeasured:
            self.metrics.request_finished(seq, prefill_start, at)

    def _publish_prefilled(self) -> None:
        """The step's prefill is done and its decode not begun: the prefilled requests' first tokens go now (a
        second "step" event of the same step, without finishes; the step is counted once, in _publish)."""
        tokens, self._step_tokens = self._step_tokens, []
        self._sent += len(tokens)
        if tokens:
            self.out.put(("step", tokens, [], len(self.engine.scheduler.waiting), self._added))

    def _publish(self, start_ns: int, finished: list[Sequence]) -> None:
        """One step's tokens and finishes to the server (one event), and the step counted."""
        tokens, self._step_tokens = self._step_tokens, []
        emitted, self._sent = self._sent + len(tokens), 0
        engine = self.engine
        if self.metrics is not None:
            if self._unmeasured:  # the requests finished before this step (which is launched now)
                self._measure_finished()
            prefilled, self._prefilled = self._prefilled, []
            self.metrics.step_done(
                (tracing.now_ns() - start_ns) / 1e9, emitted, prefilled, engine.cfg.block_size,
                engine.mgr.prefix_cache,
            )  # fmt: skip
        finishes = [self._forget(seq) for seq in finished]
        self.out.put(("step", tokens, finishes, len(engine.scheduler.waiting), self._added))
        if self.slo is not None:
            emitted_seqs, self._emitted = self._emitted, []
            for seq in finished:
                self.slo.on_finish(seq)
            self.slo.after_step(engine.flight, self.running, emitted_seqs)


def _one_line(what: str, e: BaseException) -> str:
    return f"{what}: {type(e).__name__}: {e}".splitlines()[0]


def main(conn: Connection, model: str, cfg: EngineConfig, metrics: bool, slo=None) -> None:
    """The core process' entry (multiprocessing, spawned)."""
    # Ctrl-C reaches every process of the terminal's group: the server decides how to stop (drain first), then
    # tells the core. A SIGTERM sent to the core alone still ends it (the server sees an engine failure).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    code = EngineCore(conn, model, cfg, metrics, slo, freeze_heap=True).run()
    conn.close()
    sys.exit(code)
