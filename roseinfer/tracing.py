"""Instrumentation: named regions (NVTX and torch.profiler spans) and the step log.

`region(name)` is on the hot path. When both NVTX and record_function are off it returns a shared no-op
context manager after one attribute check, so the engine can keep its regions in place at no real cost.

Region names are stable API (dashboards, diffs and users' scripts match on them); roseprof mirrors the
names and `STEP_BREAKDOWN` from here.
"""

from __future__ import annotations

import atexit
import json
import os
import threading
import time
from typing import Any

from roseinfer import env

DECODE_STEP = "roseinfer.decode_step"
BUILD_BLOCK_TABLES = "roseinfer.decode_step_sessions.build_block_tables"
H2D_BLOCK_TABLES = "roseinfer.decode_step_sessions.h2d_block_tables"
MODEL_FORWARD = "roseinfer.model.forward"
KV_APPEND = "roseinfer.kv.append_token"
PREFILL = "roseinfer.prefill"
SAMPLE = "roseinfer.sample"
SCHEDULER_STEP = "roseinfer.scheduler.step"
# The parts of the model's forward (eager steps, prefill, and while a decode step is captured in a CUDA graph, so
# that a replay's kernels can be attributed to them): the token and position embeddings; per layer the attention
# (QKV projection, KV append, attention, output projection), every residual add + LayerNorm (ln_1, ln_2, and the
# final ln_f) and the MLP; then the lm_head GEMM and the greedy argmax (in a graph also the next step's inputs
# written from it).
EMBEDDING = "roseinfer.embedding"
ATTENTION = "roseinfer.layer.attention"
LAYERNORM = "roseinfer.layer.layernorm"
MLP = "roseinfer.layer.mlp"
LM_HEAD = "roseinfer.lm_head"
ARGMAX = "roseinfer.argmax"
REGION_NAMES = (
    DECODE_STEP,
    BUILD_BLOCK_TABLES,
    H2D_BLOCK_TABLES,
    MODEL_FORWARD,
    KV_APPEND,
    PREFILL,
    SAMPLE,
    SCHEDULER_STEP,
    EMBEDDING,
    ATTENTION,
    LAYERNORM,
    MLP,
    LM_HEAD,
    ARGMAX,
)
# The regions a decode step is broken down into (dashboards stack them per step), in display order.
STEP_BREAKDOWN = (BUILD_BLOCK_TABLES, H2D_BLOCK_TABLES, MODEL_FORWARD, KV_APPEND, SAMPLE)


class _State:
    __slots__ = ("enabled", "nvtx", "record_function", "_push", "_pop")

    def __init__(self) -> None:
        self.enabled = False
        self.nvtx = False
        self.record_function = False
        self._push = None
        self._pop = None


STATE = _State()


def _nvtx_functions():
    """NVTX push/pop through the `nvtx` package (works without a CUDA build of torch); torch's otherwise."""
    try:
        import nvtx

        return (lambda name: nvtx.push_range(name)), (lambda: nvtx.pop_range())
    except ImportError:
        import torch

        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop


def configure(nvtx: bool | None = None, record_function: bool | None = None) -> None:
    """Switch regions on or off; None keeps the value from the environment (ROSEINFER_NVTX, ...)."""
    e = env.reload()
    STATE.nvtx = e.nvtx if nvtx is None else nvtx
    STATE.record_function = e.record_function if record_function is None else record_function
    if STATE.nvtx and STATE._push is None:
        STATE._push, STATE._pop = _nvtx_functions()
    STATE.enabled = STATE.nvtx or STATE.record_function


class _NullRegion:
    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


_NULL = _NullRegion()


class _Region:
    __slots__ = ("name", "_rf")

    def __init__(self, name: str) -> None:
        self.name = name
        self._rf = None

    def __enter__(self) -> None:
        if STATE.nvtx:
            STATE._push(self.name)
        if STATE.record_function:
            import torch

            self._rf = torch.profiler.record_function(self.name)
            self._rf.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self._rf is not None:
            self._rf.__exit__(None, None, None)
            self._rf = None
        if STATE.nvtx:
            STATE._pop()


def region(name: str):
    """A context manager marking `name` on the timeline; a shared no-op when tracing is off."""
    if not STATE.enabled:
        return _NULL
    return _Region(name)


def time_calls(obj: object, labels: dict[str, str], into: dict[str, list[int]]) -> None:
    """Host time of each call to some of `obj`'s methods, without a profiler: labels maps a method name to the
    label its call times (perf_counter_ns) are appended under in `into`. Only this object's methods are wrapped
    (an instance attribute shadows the class's), so nothing else pays for it. The engine and the runner say
    which of their parts can be timed (`Engine.time_parts`); scripts/bench_decode_host.py reads the result."""
    for name, label in labels.items():
        method = getattr(obj, name)
        into.setdefault(label, [])

        def timed(*args, _method=method, _times=into[label], **kwargs):
            t0 = time.perf_counter_ns()
            try:
                return _method(*args, **kwargs)
            finally:
                _times.append(time.perf_counter_ns() - t0)

        setattr(obj, name, timed)


class StepLogWriter:
    """Writes the step log: per decode step and per token timings, as JSON lines to ROSEINFER_STEP_LOG
    (roseprof reads it).

    Records (one JSON object a line, `type` first):
      {"type": "meta", "clock": "monotonic_ns", "pid": ..., "block_size": ...}
      {"type": "step", "index": k, "start_ns", "end_ns", "batch_size", "rollovers", "cow", "requests": [ids]}
      {"type": "prefill", "start_ns", "end_ns", "batch_size", "tokens", "cow", "requests": [ids]}
      {"type": "request", "id", "arrival_ns", "prompt_tokens", "output_tokens", "token_ns": [...],
       "token_step": [...], "preemptions"}
    The k-th "step" record is the k-th `roseinfer.decode_step` range of the same run: both are emitted by
    the same code, in the same order, once per decode step. `token_step[i]` is the index of the decode step
    that emitted token i (-1 for the token produced by prefill), so ITL can be split by rollover steps. With the
    overlapped decode (CUDA graphs) a step record is what the host did in that range: reserve slots for and
    launch the next step (its rollovers and copy-on-writes), then read and emit the previous step's tokens; a
    range may only launch (after a prefill) or only read (a drain).
    Timestamps are time.monotonic_ns(). A profiler's timeline has its own time base, so the join is by order
    (k-th record to k-th range), and the offset between the clocks is then read off the joined pairs.
    """

    def __init__(self, path: str, meta: dict[str, Any] | None = None) -> None:
        self.path = path
        self._lines: list[str] = []
        self._lock = threading.Lock()
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.step_index = 0
        self.write({"type": "meta", "clock": "monotonic_ns", "pid": os.getpid(), **(meta or {})})
        atexit.register(self.close)

    def write(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._lines.append(json.dumps(record, separators=(",", ":")))
            # Flush in chunks: a line per step would cost a syscall per step on the hot path.
            if len(self._lines) >= 256:
                self._flush_locked()

    def step(self, start_ns: int, end_ns: int, batch_size: int, rollovers: int, cow: int, requests) -> None:
        self.write(
            {
                "type": "step",
                "index": self.step_index,
                "start_ns": start_ns,
                "end_ns": end_ns,
                "batch_size": batch_size,
                "rollovers": rollovers,
                "cow": cow,
                "requests": list(requests),
            }
        )
        self.step_index += 1

    def _flush_locked(self) -> None:
        if self._fh is None or not self._lines:
            return
        self._fh.write("\n".join(self._lines) + "\n")
        self._fh.flush()
        self._lines.clear()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def close(self) -> None:
        with self._lock:
            self._flush_locked()
            if self._fh is not None:
                self._fh.close()
                self._fh = None


_STEP_LOG: StepLogWriter | None = None


def step_log(meta: dict[str, Any] | None = None) -> StepLogWriter | None:
    """The process's step log when ROSEINFER_STEP_LOG is set (one per process, shared by engines)."""
    global _STEP_LOG
    path = env.reload().step_log
    if path is None:
        return None
    if _STEP_LOG is None or _STEP_LOG.path != path:
        _STEP_LOG = StepLogWriter(path, meta)
    return _STEP_LOG


def now_ns() -> int:
    return time.monotonic_ns()


configure()
