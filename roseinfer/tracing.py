"""Instrumentation: named regions (NVTX and torch.profiler spans) and the step log.

`region(name)` is on the hot path. When both NVTX and record_function are off it returns a shared no-op
context manager after one attribute check, so the engine can keep its regions in place at no real cost.

Region names are stable API (dashboards, diffs and users' scripts match on them); roseprof mirrors the
names and `STEP_BREAKDOWN` from here.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import threading
import time
from typing import Any

from roseinfer import env

DECODE_STEP = "roseinfer.decode_step"
BUILD_BLOCK_TABLES = "roseinfer.decode_step_sessions.build_block_tables"
H2D_BLOCK_TABLES = "roseinfer.decode_step_sessions.h2d_block_tables"
# Static decode, blocks reserved ahead: the next blocks allocated right after a step's launch, off the path from the
# previous step's tokens to the next launch (roseinfer/decode_slots.py).
RESERVE_BLOCKS_AHEAD = "roseinfer.decode_step_sessions.reserve_blocks_ahead"
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
    RESERVE_BLOCKS_AHEAD,
)
# The regions a decode step is broken down into (dashboards stack them per step), in display order.
STEP_BREAKDOWN = (
    BUILD_BLOCK_TABLES,
    H2D_BLOCK_TABLES,
    MODEL_FORWARD,
    RESERVE_BLOCKS_AHEAD,
    KV_APPEND,
    SAMPLE,
)


class _State:
    __slots__ = (
        "enabled",
        "nvtx",
        "record_function",
        "_push",
        "_pop",
        "_profiling",
        "sleep_region",
        "sleep_s",
    )

    def __init__(self) -> None:
        self.enabled = False
        self.nvtx = False
        self.record_function = False
        self._push = None
        self._pop = None
        self._profiling = None  # () -> bool: is a torch profiler recording now
        self.sleep_region: str | None = None  # tests only: ROSEINFER_TEST_SLEEP_REGION
        self.sleep_s = 0.0


STATE = _State()


def _nvtx_functions():
    """NVTX push/pop through the `nvtx` package (works without a CUDA build of torch); torch's otherwise.

    `nvtx.push_range(name)` looks up the domain, registers the string and builds the event's attributes on every
    call (~1.5 us a range on the CPU machine); the same calls made once per region name and kept cost ~0.15 us,
    and NVTX records the same event (nvtx 0.2.10's `_lib`, the version pinned for Nsight Systems 2022.4)."""
    try:
        import nvtx
    except ImportError:
        import torch

        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    try:
        from nvtx._lib import Domain, EventAttributes, RegisteredString
        from nvtx._lib import pop_range as lib_pop
        from nvtx._lib import push_range as lib_push
    except ImportError:  # another nvtx version: its public functions
        return (lambda name: nvtx.push_range(name)), (lambda: nvtx.pop_range())
    handle = Domain(None).handle  # the default domain, as nvtx.push_range(name) uses
    attributes: dict[str, object] = {}

    def push(name: str) -> None:
        a = attributes.get(name)
        if a is None:
            a = attributes[name] = EventAttributes(RegisteredString(handle, name), "blue", None, None)
        lib_push(a, handle)

    return push, (lambda: lib_pop(handle))


def _nvtx_tool_attached() -> bool:
    # NVTX_DISABLE: the nvtx package's own off switch (its public functions then do nothing).
    return bool(os.environ.get("NVTX_INJECTION64_PATH")) and not os.environ.get("NVTX_DISABLE")


def _torch_profiling_check():
    """A cheap check (~0.1 us) that a torch profiler is recording (on this thread: the engine's regions are all
    on the thread that steps it, where roseinfer's own profiler runs). A record_function span costs ~6 us even when
    none is (the op is dispatched all the same), and torch.profiler's schedule leaves the profiler off for all
    but its window of steps: spans are made only while it records, which drops nothing it would have kept."""
    import torch

    return getattr(torch._C._autograd, "_profiler_enabled", lambda: True)


def configure(nvtx: bool | None = None, record_function: bool | None = None) -> None:
    """Switch regions on or off; None keeps the value from the environment (ROSEINFER_NVTX, ...)."""
    global _PROFILER
    e = env.reload()
    # NVTX sends ranges to a tool only if one is named in NVTX_INJECTION64_PATH when NVTX initialises (Nsight
    # Systems and Nsight Compute set it for the program they launch; the ranges' domain is made just below, which
    # initialises NVTX): without one every NVTX call is a no-op for the life of the process, so the regions'
    # Python cost (~1% of a graph decode step on the H100) is skipped too.
    STATE.nvtx = (e.nvtx if nvtx is None else nvtx) and _nvtx_tool_attached()
    STATE.record_function = e.record_function if record_function is None else record_function
    if e.torch_profile and _PROFILER is None:
        # Started now, before decode step 0: the schedule's step k is then the engine's decode step k.
        _PROFILER = TorchProfile(e)
        _PROFILER.start()
        STATE.record_function = True  # the profile's regions are the record_function spans
    if STATE.nvtx and STATE._push is None:
        STATE._push, STATE._pop = _nvtx_functions()
    if STATE.record_function and STATE._profiling is None:
        STATE._profiling = _torch_profiling_check()
    STATE.sleep_region, STATE.sleep_s = e.test_sleep_region or (None, 0.0)
    STATE.enabled = STATE.nvtx or STATE.record_function or STATE.sleep_region is not None


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
        if STATE.record_function and STATE._profiling():
            import torch

            self._rf = torch.profiler.record_function(self.name)
            self._rf.__enter__()
        if self.name == STATE.sleep_region:
            time.sleep(STATE.sleep_s)

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


# The step log's format (roseprof.workload.steplog reads every version; the meta record says which this is).
# 2: gc and preempt records; a step's `launched` and `bucket`; a prefill's `readmitted`.
STEPLOG_VERSION = 2
# A collection of the youngest generations shorter than this is not logged: there are thousands a second, and
# none is a reason for a slow token.
GC_MIN_NS = 100_000


class StepLogWriter:
    """Writes the step log: per decode step and per token timings, as JSON lines to ROSEINFER_STEP_LOG
    (roseprof reads it).

    Records (one JSON object a line, `type` first):
      {"type": "meta", "version": 2, "clock": "monotonic_ns", "pid": ..., "block_size": ...}
      {"type": "step", "index": k, "start_ns", "end_ns", "batch_size", "rollovers", "cow", "requests": [ids],
       "launched": false for a drain of the overlapped decode, "bucket": the CUDA-graph batch bucket or null}
      {"type": "prefill", "start_ns", "end_ns", "batch_size", "tokens", "cow", "requests": [ids],
       "readmitted": [ids of requests recomputed after a preemption]}
      {"type": "preempt", "t_ns", "request": id}   a running request preempted (its blocks freed) to make room
      {"type": "gc", "start_ns", "end_ns", "generation", "collected"}   a collection by Python's gc (from
       gc.callbacks; the youngest generations' only when they took GC_MIN_NS or more)
      {"type": "request", "id", "arrival_ns", "prompt_tokens", "output_tokens", "token_ns": [...],
       "token_step": [...], "preemptions"}
      {"type": "run_start", "run": r, "ts_ns", "next_step"}   a benchmark run (warm-up or measured) begins
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
        self._fh = open(path, "a", encoding="utf-8")  # noqa: SIM115 - closed in close()
        self.step_index = 0
        # Collections seen by the gc callback, written at the next flush: the callback runs inside the collector,
        # where it must not take the lock or do I/O (a collection can start inside `write`).
        self._gc_pending: list[tuple[int, int, int, int]] = []
        self._gc_start = 0
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
        gc.callbacks.append(self._on_gc)
        atexit.register(self.close)

    def _on_gc(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._gc_start = time.monotonic_ns()
            return
        end = time.monotonic_ns()
        if info["generation"] == 2 or end - self._gc_start >= GC_MIN_NS:
            self._gc_pending.append((self._gc_start, end, info["generation"], info["collected"]))

    def write(self, record: dict[str, Any]) -> None:
        with self._lock:
            self._lines.append(json.dumps(record, separators=(",", ":")))
            # Flush in chunks: a line per step would cost a syscall per step on the hot path.
            if len(self._lines) >= 256:
                self._flush_locked()

    def step(
        self, start_ns: int, end_ns: int, batch_size: int, rollovers: int, cow: int, requests, **extra: Any
    ) -> None:
        """A decode step record; `extra` adds fields (launched, bucket)."""
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
                **extra,
            }
        )
        self.step_index += 1

    def preempt(self, request_id: int) -> None:
        self.write({"type": "preempt", "t_ns": now_ns(), "request": request_id})

    def _flush_locked(self) -> None:
        pending, self._gc_pending = self._gc_pending, []  # a collection during the loop lands in the new list
        for start, end, generation, collected in pending:
            record = {"type": "gc", "start_ns": start, "end_ns": end, "generation": generation}
            self._lines.append(json.dumps({**record, "collected": collected}, separators=(",", ":")))
        if self._fh is None or not self._lines:
            return
        self._fh.write("\n".join(self._lines) + "\n")
        self._fh.flush()
        self._lines.clear()

    def flush(self) -> None:
        with self._lock:
            self._flush_locked()

    def close(self) -> None:
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
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


_RUNS_STARTED = 0


def run_start() -> None:
    """Mark in the step log that a benchmark run begins, so profiles of several runs (--warmup-runs,
    --repeat-runs) show where each starts. `next_step` is the index the run's first step record will have."""
    log = step_log()
    if log is None:
        return
    global _RUNS_STARTED
    log.write({"type": "run_start", "run": _RUNS_STARTED, "ts_ns": now_ns(), "next_step": log.step_index})
    _RUNS_STARTED += 1


def now_ns() -> int:
    return time.monotonic_ns()


class TorchProfile:
    """torch.profiler inside the engine (ROSEINFER_TORCH_PROFILE=DIR): a schedule of decode steps, advanced once
    per decode step by `profiler_step()`; the trace goes to DIR/trace.json.gz when the window ends, or at exit
    when the run ends inside it."""

    def __init__(self, e: env.Env) -> None:
        self.dir = e.torch_profile
        self.e = e
        self.prof = None
        self.done = False
        self.tagged = False

    def start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        activities = [ProfilerActivity.CPU]
        if torch.cuda.is_available() and not self.e.torch_profile_cpu_only:
            activities.append(ProfilerActivity.CUDA)
        wait, warmup, active = self.e.torch_profile_schedule
        os.makedirs(self.dir, exist_ok=True)
        self.prof = profile(
            activities=activities,
            schedule=schedule(wait=wait, warmup=warmup, active=active, repeat=1),
            on_trace_ready=self._save,
            with_stack=self.e.torch_profile_with_stack,
        )
        self.prof.record_steps = False  # no ProfilerStep#N spans: the decode_step spans are the steps
        self.prof.start()
        atexit.register(self.close)

    def _save(self, prof) -> None:
        prof.export_chrome_trace(os.path.join(self.dir, "trace.json.gz"))
        self.done = True

    def step(self) -> None:
        self.prof.step()
        if not self.tagged and self.prof.current_action.name.startswith("RECORD"):
            import torch

            # Kineto keeps metadata only while it records; read back as the run's tool version.
            self.prof.add_metadata("torch_version", torch.__version__)
            self.tagged = True
        if self.done:  # the window is written: stop profiling for the rest of the run
            self.close()

    def close(self) -> None:
        global _PROFILER
        if self.prof is not None:
            prof, self.prof = self.prof, None
            prof.stop()  # inside the window this saves what was recorded (on_trace_ready)
        _PROFILER = None


_PROFILER: TorchProfile | None = None


def profiler_step() -> None:
    """Once per decode step: advances torch.profiler's schedule when ROSEINFER_TORCH_PROFILE is set."""
    if _PROFILER is not None:
        _PROFILER.step()


configure()
