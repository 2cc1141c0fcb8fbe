"""Read the engine's step log (ROSEINFER_STEP_LOG, JSON lines; written by roseinfer.tracing).

Version 1 logs (no `version` in the meta record) have meta, step, prefill and request records. Version 2 adds
what ITL spike attribution needs: `gc` records (a collection's start and end, from `gc.callbacks`), `preempt`
records (which request was preempted, when), and per step `launched` (false: a drain of the overlapped decode)
and `bucket` (the CUDA-graph batch bucket). A version 1 log still reads; the analyses infer what they can.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

STEPLOG_VERSION = 2  # the newest format this reader knows (roseinfer.tracing.STEPLOG_VERSION)


@dataclass
class StepLogRecords:
    meta: dict = field(default_factory=dict)
    steps: list[dict] = field(default_factory=list)
    prefills: list[dict] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)
    run_starts: list[dict] = field(default_factory=list)  # a benchmark run begins (warm-up or measured)
    gc: list[dict] = field(
        default_factory=list
    )  # version 2: {"start_ns", "end_ns", "generation", "collected"}
    preempts: list[dict] = field(default_factory=list)  # version 2: {"t_ns", "request"}
    bad_lines: int = 0  # e.g. a last line cut short when the capture was interrupted

    @property
    def version(self) -> int:
        return int(self.meta.get("version", 1))


def read_steplog(path: str) -> StepLogRecords | None:
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return None
    log = StepLogRecords()
    kinds = {"step": log.steps, "request": log.requests, "prefill": log.prefills, "gc": log.gc}
    kinds["preempt"] = log.preempts
    kinds["run_start"] = log.run_starts
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                log.bad_lines += 1
                continue
            kind = rec.get("type") if isinstance(rec, dict) else None
            if kind in kinds:
                kinds[kind].append(rec)
            elif kind == "meta" and not log.meta:
                log.meta = rec
    # Several engines in one process share the log; their step records interleave in time order already.
    log.steps.sort(key=lambda r: r["start_ns"])
    return log
