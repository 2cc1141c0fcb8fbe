"""Read the engine's step log (ROSEINFER_STEP_LOG, JSON lines; written by roseinfer.tracing)."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field


@dataclass
class StepLogRecords:
    meta: dict = field(default_factory=dict)
    steps: list[dict] = field(default_factory=list)
    prefills: list[dict] = field(default_factory=list)
    requests: list[dict] = field(default_factory=list)
    run_starts: list[dict] = field(default_factory=list)  # a benchmark run begins (warm-up or measured)
    bad_lines: int = 0  # e.g. a last line cut short when the capture was interrupted


def read_steplog(path: str) -> StepLogRecords | None:
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return None
    log = StepLogRecords()
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                log.bad_lines += 1
                continue
            kind = rec.get("type")
            if kind == "step":
                log.steps.append(rec)
            elif kind == "request":
                log.requests.append(rec)
            elif kind == "prefill":
                log.prefills.append(rec)
            elif kind == "run_start":
                log.run_starts.append(rec)
            elif kind == "meta" and not log.meta:
                log.meta = rec
    # Several engines in one process share the log; their step records interleave in time order already.
    log.steps.sort(key=lambda r: r["start_ns"])
    return log
