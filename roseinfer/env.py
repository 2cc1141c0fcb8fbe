"""Every environment switch the engine reads, declared once, typed and commented.

Read at import time into `ENV`; tests and the profiler may call `reload()` after changing os.environ.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# The variables' names, as roseprof records them with a run (it mirrors this tuple).
ROSEINFER_NVTX = "ROSEINFER_NVTX"
ROSEINFER_RECORD_FUNCTION = "ROSEINFER_RECORD_FUNCTION"
ROSEINFER_STEP_LOG = "ROSEINFER_STEP_LOG"
ROSELLM_TRITON_KV_APPEND = "ROSELLM_TRITON_KV_APPEND"
ROSELLM_TRITON_KV_APPEND_MIN_BATCH = "ROSELLM_TRITON_KV_APPEND_MIN_BATCH"
ROSEINFER_TEST_SLEEP_REGION = "ROSEINFER_TEST_SLEEP_REGION"
KEYS = (
    ROSEINFER_NVTX,
    ROSEINFER_RECORD_FUNCTION,
    ROSEINFER_STEP_LOG,
    ROSELLM_TRITON_KV_APPEND,
    ROSELLM_TRITON_KV_APPEND_MIN_BATCH,
    ROSEINFER_TEST_SLEEP_REGION,
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


def read() -> Env:
    return Env(
        nvtx=_flag(ROSEINFER_NVTX, False),
        record_function=_flag(ROSEINFER_RECORD_FUNCTION, False),
        step_log=os.environ.get(ROSEINFER_STEP_LOG) or None,
        triton_kv_append=_flag(ROSELLM_TRITON_KV_APPEND, True),
        triton_kv_append_min_batch=_int(ROSELLM_TRITON_KV_APPEND_MIN_BATCH, 128),
        triton_kv_append_min_batch_set=bool(os.environ.get(ROSELLM_TRITON_KV_APPEND_MIN_BATCH)),
        test_sleep_region=_sleep_region(ROSEINFER_TEST_SLEEP_REGION),
    )


ENV = read()


def reload() -> Env:
    global ENV
    ENV = read()
    return ENV
