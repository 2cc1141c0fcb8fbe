"""The step log: per decode step and per token timings as JSON lines (ROSEINFER_STEP_LOG; roseprof joins it to
a profile's decode-step ranges). Its clock is `tracing.now_ns`, the one the engine times its steps with.
"""

from __future__ import annotations

import gc
import json
import os
import threading
import time
from typing import Any

from roseinfer import env, exit_hooks, gc_interrupts
from roseinfer.names import STEPLOG_VERSION
from roseinfer.tracing import now_ns

# STEPLOG_VERSION (roseinfer/names.py) is the step log's format (roseprof.workload.steplog reads every version;
# the meta record says which this is). 2: gc and preempt records; a step's `launched` and `bucket`; a
# prefill's `readmitted`. 3: while regions are on, a step's `cpu_ns` and `cpu_own_ns` (on a CPU engine on one
# intra-op thread). 4: while regions are on, a step's `host_own_ns`, on every device (tracing.take_step_times).
# 5: with `cpu_ns`, a step's `wait_ns` where the kernel counts it (roseinfer/run_delay.py).

# A collection of the youngest generations shorter than this is not logged: there are thousands a second, and
# none is a reason for a slow token.
GC_MIN_NS = 100_000


class StepRecords:
    """The records an engine writes (the shapes below, in StepLogWriter's docstring), to some sink: the step log's
    file (StepLogWriter) or the flight recorder's ring (roseinfer/flight_recorder.py). A sink says what `write`
    does with one record; `step` numbers the decode steps."""

    step_index = 0

    def write(self, record: dict[str, Any]) -> None:
        raise NotImplementedError

    def flush(self) -> None:
        pass

    def step(
        self, start_ns: int, end_ns: int, batch_size: int, rollovers: int, cow: int, batch, **extra: Any
    ) -> None:
        """A decode step record; `batch`: the step's sequences (their ids are written); `extra` adds fields
        (launched, bucket)."""
        self.write(step_record(self.step_index, start_ns, end_ns, batch_size, rollovers, cow, batch, **extra))
        self.step_index += 1

    def preempt(self, request_id: int) -> None:
        self.write({"type": "preempt", "t_ns": now_ns(), "request": request_id})


class GcWatch:
    """Python's collections (gc.callbacks) as gc records, kept until taken: the callback runs inside the collector,
    where a sink must not take a lock or do I/O (a collection can start inside `write`), so it only appends. A
    Ctrl-C that lands in the callback is delivered after the collection (`roseinfer.gc_interrupts`)."""

    def __init__(self) -> None:
        self.pending: list[tuple[int, int, int, int]] = []
        self._start = 0
        gc.callbacks.append(self._on_gc)
        self._sigint = gc_interrupts.hold()  # after: its last callback ends the collection after this one

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._start = time.monotonic_ns()
            return
        end = time.monotonic_ns()
        if info["generation"] == 2 or end - self._start >= GC_MIN_NS:
            self.pending.append((self._start, end, info["generation"], info["collected"]))

    def take(self) -> list[dict[str, Any]]:
        pending, self.pending = self.pending, []  # a collection meanwhile lands in the new list
        return [
            {"type": "gc", "start_ns": start, "end_ns": end, "generation": generation, "collected": collected}
            for start, end, generation, collected in pending
        ]

    def close(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        gc_interrupts.release(self._sigint)
        self._sigint = None


def step_record(
    index: int, start_ns: int, end_ns: int, batch_size: int, rollovers: int, cow: int, batch, **extra: Any
) -> dict[str, Any]:
    return {
        "type": "step",
        "index": index,
        "start_ns": start_ns,
        "end_ns": end_ns,
        "batch_size": batch_size,
        "rollovers": rollovers,
        "cow": cow,
        "requests": [s.id for s in batch],
        **extra,
    }


def request_record(seq) -> dict[str, Any]:
    """A sequence's request record (its token lists by reference: the sequence has finished)."""
    return {
        "type": "request",
        "id": seq.id,
        "arrival_ns": seq.arrival_ns,
        "prompt_tokens": len(seq.prompt_ids),
        "output_tokens": len(seq.output_ids),
        "token_ns": seq.token_ns,
        "token_step": seq.token_step,
        "preemptions": seq.preemptions,
        "request_id": seq.request_id,
        "finish_reason": seq.finish_reason,
    }


class Tee(StepRecords):
    """Two sinks fed the same records (the step log and the flight recorder both on)."""

    def __init__(self, *sinks: StepRecords) -> None:
        self.sinks = sinks

    def write(self, record: dict[str, Any]) -> None:
        for sink in self.sinks:
            sink.write(record)

    def step(self, *args: Any, **extra: Any) -> None:
        for sink in self.sinks:
            sink.step(*args, **extra)

    def flush(self) -> None:
        for sink in self.sinks:
            sink.flush()


def tee(*sinks: StepRecords | None) -> StepRecords | None:
    """The sinks that are on, as one (None: none is)."""
    on = [s for s in sinks if s is not None]
    return None if not on else on[0] if len(on) == 1 else Tee(*on)


class StepLogWriter(StepRecords):
    """Writes the step log: per decode step and per token timings, as JSON lines to ROSEINFER_STEP_LOG
    (roseprof reads it).

    Records (one JSON object a line, `type` first):
      {"type": "meta", "version": 5, "clock": "monotonic_ns", "pid": ..., "block_size": ..., "rank": r,
       "world_size": n}   (with tensor parallelism each rank writes its own log, `rank_path`; the same step
       indices on every rank, since every rank runs the same schedule)
      {"type": "step", "index": k, "start_ns", "end_ns", "batch_size", "rollovers", "cow", "requests": [ids],
       "launched": false for a drain of the overlapped decode, "bucket": the CUDA-graph batch bucket or null,
       while regions are on (a profiler, a test switch), on every device: "host_own_ns": {region: its own wall
       time in the step, less its children's} (they sum to the step region's wall time; on a GPU a region that
       waits for the GPU holds the wait), and in a CPU engine on one intra-op thread also "cpu_ns": the step
       region's thread CPU time, "cpu_own_ns": {region: its own thread CPU time in the step, less its
       children's} (they sum to cpu_ns; no wait for a core in them), and where Linux counts it "wait_ns": the
       step's waits for a core (its thread's run delay, roseinfer/run_delay.py; no sleep or lock in it)}
      {"type": "prefill", "start_ns", "end_ns", "batch_size", "tokens", "cow", "requests": [ids],
       "readmitted": [ids of requests recomputed after a preemption]}
      {"type": "preempt", "t_ns", "request": id}   a running request preempted (its blocks freed) to make room
      {"type": "gc", "start_ns", "end_ns", "generation", "collected"}   a collection by Python's gc (from
       gc.callbacks; the youngest generations' only when they took GC_MIN_NS or more)
      {"type": "request", "id", "arrival_ns", "prompt_tokens", "output_tokens", "token_ns": [...],
       "token_step": [...], "preemptions"}
      {"type": "run_start", "run": r, "ts_ns", "next_step", "warmup"}   a benchmark run begins (warmup: bool)
    The k-th "step" record is the k-th `roseinfer.decode_step` range of the same run: both are emitted by
    the same code, in the same order, once per decode step. `token_step[i]` is the index of the decode step
    that emitted token i (-1 for the token produced by prefill), so ITL can be split by rollover steps. With the
    overlapped decode (CUDA graphs) a step record is what the host did in that range: reserve slots for and
    launch the next step (its rollovers and copy-on-writes), then read and emit the previous step's tokens; a
    range may only launch (after a prefill) or only read (a drain).
    Timestamps are time.monotonic_ns(). A profiler's timeline has its own time base, so the join is by order
    (k-th record to k-th range), and the offset between the clocks is then read off the joined pairs. Where a
    profiler saw only a window of steps (torch.profiler's schedule), the meta record's realtime_ns /
    monotonic_ns pair maps its Unix-time timeline onto this clock and roseprof joins by time instead.
    """

    def __init__(self, path: str, meta: dict[str, Any] | None = None) -> None:
        self.path = path
        self._lines: list[str] = []
        self._lock = threading.Lock()
        # never looser than rw-r--r--: nsys 2022.4 starts the program with umask 0, and a step log in a run
        # folder was left writable by everyone
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._fh = open(fd, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.step_index = 0
        # A Unix-time / monotonic pair read together: a profiler on Unix time (torch.profiler) joins by time.
        real, mono = time.time_ns(), time.monotonic_ns()
        self.write(
            {
                "type": "meta",
                "version": STEPLOG_VERSION,
                "clock": "monotonic_ns",
                "pid": os.getpid(),
                "realtime_ns": real,
                "monotonic_ns": mono,
                **(meta or {}),
            }
        )
        self._gc = GcWatch()  # collections, written at the next flush
        # `close` at exit, the first Ctrl-C during its last write waiting for it (`roseinfer.exit_hooks`)
        self._exit_hook = exit_hooks.register(self.close)

    def write(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._lines.append(json.dumps(record, separators=(",", ":")))
            # Flush in chunks: a line per step would cost a syscall per step on the hot path.
            if len(self._lines) >= 256:
                self._flush_locked()

    def _flush_locked(self) -> None:
        for record in self._gc.take():
            self._lines.append(json.dumps(record, separators=(",", ":")))
        if self._fh is None or not self._lines:
            return
        self._fh.write("\n".join(self._lines) + "\n")
        self._fh.flush()
        self._lines.clear()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def close(self) -> None:
        self._gc.close()
        with self._lock:
            self._flush_locked()
            if self._fh is not None:
                self._fh.close()
                self._fh = None


_STEP_LOG: StepLogWriter | None = None
_RANK = 0  # this process's tensor-parallel rank, once an engine said so


def rank_path(path: str, rank: int) -> str:
    """Where rank `rank` writes the log named `path`: rank 0 the path itself (what a capture reads), rank r
    `NAME.rank<r>.EXT` beside it."""
    if rank == 0:
        return path
    stem, ext = os.path.splitext(path)
    return f"{stem}.rank{rank}{ext}"


def step_log(meta: dict[str, Any] | None = None, rank: int | None = None) -> StepLogWriter | None:
    """The process's step log when ROSEINFER_STEP_LOG is set (one per process, shared by engines); `rank`: the
    tensor-parallel rank, whose log is `rank_path(ROSEINFER_STEP_LOG, rank)`."""
    global _STEP_LOG, _RANK
    if rank is not None:
        _RANK = rank
    path = env.reload().step_log
    if path is None:
        return None
    path = rank_path(path, _RANK)
    if _STEP_LOG is None or _STEP_LOG.path != path:
        _STEP_LOG = StepLogWriter(path, meta)
    return _STEP_LOG


def close() -> None:
    """Write out and close the process's step log. A tensor-parallel rank that multiprocessing started calls this
    before it says it finished (`distributed._rank_main`): a teardown that aborts after that loses nothing."""
    global _STEP_LOG
    if _STEP_LOG is not None:
        _STEP_LOG.close()
        _STEP_LOG = None


_RUNS_STARTED = 0


def run_start(warmup: bool = False) -> None:
    """Mark in the step log that a benchmark run begins, so profiles of several runs (--warmup-runs,
    --repeat-runs) show where each starts. `next_step` is the index the run's first step record will have;
    `warmup` says the run is a warm-up (roseprof leaves its steps out of the steady state)."""
    log = step_log()
    if log is None:
        return
    global _RUNS_STARTED
    log.write(
        {
            "type": "run_start",
            "run": _RUNS_STARTED,
            "ts_ns": now_ns(),
            "next_step": log.step_index,
            "warmup": warmup,
        }
    )
    _RUNS_STARTED += 1
