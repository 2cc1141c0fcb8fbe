"""Every environment switch the engine reads, declared once, typed and commented.

Read at import time into `ENV`; tests and the profiler may call `reload()` after changing os.environ.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# The variables' names, declared once in roseinfer/names.py (torch-free; roseprof records them with a run).
from roseinfer.names import (  # noqa: F401
    ENV_KEYS as KEYS,
)
from roseinfer.names import (
    ROSEINFER_NSYS_WINDOWS,
    ROSEINFER_NVTX,
    ROSEINFER_RECORD_FUNCTION,
    ROSEINFER_REGION_CLOCKS,
    ROSEINFER_STEP_LOG,
    ROSEINFER_TEST_BUSY_REGION,
    ROSEINFER_TEST_FAIL_STEP,
    ROSEINFER_TEST_FAIL_WINDOW_RANK,
    ROSEINFER_TEST_SLEEP_RANK,
    ROSEINFER_TEST_SLEEP_REGION,
    ROSEINFER_TEST_SLOW_EVERY,
    ROSEINFER_TORCH_PROFILE,
    ROSEINFER_TORCH_PROFILE_CPU_ONLY,
    ROSEINFER_TORCH_PROFILE_SCHEDULE,
    ROSEINFER_TORCH_PROFILE_WITH_STACK,
    ROSELLM_TRITON_KV_APPEND,
    ROSELLM_TRITON_KV_APPEND_MIN_BATCH,
    TORCH_PROFILE_SCHEDULE,
)


def _flag(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    return raw.strip().lower() not in ("0", "false", "no", "off")


def _int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{name} must be an integer, got {raw!r}") from None


@dataclass(frozen=True)
class Env:
    # Emit NVTX push/pop ranges around the engine's regions (read by Nsight Systems / Nsight Compute).
    nvtx: bool
    # Emit torch.profiler record_function spans around the same regions (read by torch.profiler).
    record_function: bool
    # When set, the step log (per decode step and per token timings) is written to this file.
    step_log: str | None
    # Each region's own host time (and on a CPU engine on one thread its CPU time) in every decode step's step log
    # record, with no profiler and no window (tracing.set_region_clocks): what an always-on consumer of the step
    # records (the flight recorder's SLO captures) needs to name a slow step's region. Costs a few % of a CPU
    # engine's step (docs/BENCHMARKS.md, session 23); off, a steps window turns the clocks on for its steps only.
    region_clocks: bool
    # Use the Triton KV-append kernels on CUDA (the torch path otherwise).
    triton_kv_append: bool
    # Below this batch size the torch KV-append path runs even when Triton is on: eagerly, Triton's launch from
    # Python costs more than torch's kernels at small batches. Inside a CUDA graph nothing is launched from
    # Python, so captured steps use Triton at every batch size unless this variable is set explicitly.
    triton_kv_append_min_batch: int
    triton_kv_append_min_batch_set: bool
    # Tests only: `region:ms` makes every entry into that region sleep ms milliseconds inside it, a large and
    # deterministic slowdown that lets tests check what `roseprof diff` reports without racing two captures'
    # timings. Never set it in a benchmark; a capture records it in its manifest.
    test_sleep_region: tuple[str, float] | None
    # Tests only: with tensor parallelism, only this rank sleeps in test_sleep_region (every rank when unset): a
    # rank made late on purpose, whose lateness roseprof's straggler analysis must find and place in that region.
    test_sleep_rank: int | None
    # Tests only: `region:ms` makes every entry into that region spend ms milliseconds of CPU time in a busy loop
    # (the sleep above costs no CPU, which a diff judging regions by their CPU time cannot see).
    test_busy_region: tuple[str, float] | None
    # Tests only: N slows only every Nth entry into the sleep or busy region above (its 1st to N-1th run as usual):
    # a cause planted on one decode step in N, which roseprof live must find among the others (None: every entry).
    test_slow_every: int | None
    # Tests only: from this decode step index on, every engine step raises (a failed device or rank, as the
    # server sees it: it must fail its requests, turn unhealthy and exit non-zero, never hang).
    test_fail_step: int | None
    # Tests only: this tensor-parallel rank's capture windows fail (roseinfer serve --enable-profiling; their
    # export raises): a window must then fail on every rank in one line while the server serves on.
    test_fail_window_rank: int | None
    # When set, torch.profiler runs inside the engine and writes DIR/trace.json.gz (Kineto) when its window ends
    # or at exit; record_function spans are then on. The profiler advances once per decode step.
    torch_profile: str | None
    # The profiler's schedule in decode steps: "wait,warmup,active" (steps skipped, warmed up, recorded).
    torch_profile_schedule: tuple[int, int, int]
    # Record Python stacks with each op (with_stack=True; costs time while recording).
    torch_profile_with_stack: bool
    # CPU activity only, even where CUDA exists (no kernels; the profiler's cost on the GPU side is gone).
    torch_profile_cpu_only: bool
    # Set by `roseprof nsys --capture-range nvtx --capture-range-end repeat` for a server it starts: the folder
    # nsys writes each recording range's stream into (its TMPDIR), where an nsys capture window finds its own
    # (roseinfer/serve/nsys_window.py). Unset: the server is not under such an nsys, and tool "nsys" is refused.
    nsys_windows: str | None


def _sleep_region(name: str) -> tuple[str, float] | None:
    raw = os.environ.get(name)
    if not raw:
        return None
    region, sep, ms = raw.rpartition(":")
    try:
        seconds = float(ms) / 1e3
    except ValueError:
        seconds = -1.0
    if not sep or not region or seconds < 0:
        raise ValueError(f"{name} must be REGION:MILLISECONDS, got {raw!r}")
    return region, seconds


def _every(name: str) -> int | None:
    if not os.environ.get(name):
        return None
    every = _int(name, 0)
    if every < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {os.environ[name]!r}")
    return every


def _schedule(name: str, default: tuple[int, int, int]) -> tuple[int, int, int]:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    parts = raw.split(",")
    try:
        wait, warmup, active = (int(p) for p in parts)
    except ValueError:
        raise ValueError(f"{name} must be three integers wait,warmup,active, got {raw!r}") from None
    if wait < 0 or warmup < 0 or active < 1:
        raise ValueError(f"{name}: wait and warmup must be >= 0 and active >= 1, got {raw!r}")
    return wait, warmup, active


def read() -> Env:
    return Env(
        nvtx=_flag(ROSEINFER_NVTX, False),
        record_function=_flag(ROSEINFER_RECORD_FUNCTION, False),
        step_log=os.environ.get(ROSEINFER_STEP_LOG) or None,
        region_clocks=_flag(ROSEINFER_REGION_CLOCKS, False),
        triton_kv_append=_flag(ROSELLM_TRITON_KV_APPEND, True),
        triton_kv_append_min_batch=_int(ROSELLM_TRITON_KV_APPEND_MIN_BATCH, 128),
        triton_kv_append_min_batch_set=bool(os.environ.get(ROSELLM_TRITON_KV_APPEND_MIN_BATCH)),
        test_sleep_region=_sleep_region(ROSEINFER_TEST_SLEEP_REGION),
        test_busy_region=_sleep_region(ROSEINFER_TEST_BUSY_REGION),
        test_slow_every=_every(ROSEINFER_TEST_SLOW_EVERY),
        test_sleep_rank=_int(ROSEINFER_TEST_SLEEP_RANK, -1)
        if os.environ.get(ROSEINFER_TEST_SLEEP_RANK)
        else None,
        test_fail_step=_int(ROSEINFER_TEST_FAIL_STEP, -1)
        if os.environ.get(ROSEINFER_TEST_FAIL_STEP)
        else None,
        test_fail_window_rank=_int(ROSEINFER_TEST_FAIL_WINDOW_RANK, -1)
        if os.environ.get(ROSEINFER_TEST_FAIL_WINDOW_RANK)
        else None,
        torch_profile=os.environ.get(ROSEINFER_TORCH_PROFILE) or None,
        torch_profile_schedule=_schedule(ROSEINFER_TORCH_PROFILE_SCHEDULE, TORCH_PROFILE_SCHEDULE),
        torch_profile_with_stack=_flag(ROSEINFER_TORCH_PROFILE_WITH_STACK, False),
        torch_profile_cpu_only=_flag(ROSEINFER_TORCH_PROFILE_CPU_ONLY, False),
        nsys_windows=os.environ.get(ROSEINFER_NSYS_WINDOWS) or None,
    )


ENV = read()


def reload() -> Env:
    global ENV
    ENV = read()
    return ENV
