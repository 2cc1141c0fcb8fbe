"""The step log alone as a run: what `roseinfer serve` returns from GET /debug/steps (its flight recorder) or a
ROSEINFER_STEP_LOG file, imported with no profiler's trace beside it. The trace is empty (no ranges, no GPU
ops); the run's data is the log, which the import stores as a capture's (pipeline.import_file) and the step,
ITL and spike sections read."""

from __future__ import annotations

import json
from pathlib import Path

from roseprof.drivers.base import Reader
from roseprof.errors import RoseprofError
from roseprof.model import Tool, Trace
from roseprof.workload.steplog import read_steplog

TOOL = "steps"


def sniff(head: bytes) -> bool:
    """A step log starts with its meta record (`{"type":"meta",...}`, the engine writes `type` first)."""
    first = head.lstrip().split(b"\n", 1)[0]
    if not first.startswith(b"{"):
        return False
    try:
        record = json.loads(first)
    except ValueError:
        return first.replace(b" ", b"").startswith(b'{"type":"meta"')  # a first line longer than the sniff
    return isinstance(record, dict) and record.get("type") == "meta" and "clock" in record


def read(path: Path, raw_dir: Path, label: str, limits=None) -> Trace:
    """`limits` (drivers/base.Limits) bound inflating compressed inputs: a step log is read as it is."""
    log = read_steplog(str(path))
    if log is None or not log.steps:
        raise RoseprofError(f"{label}: a step log with no decode step in it")
    version = str(log.meta.get("version", "?"))
    return Trace(tool=Tool(TOOL, version, "roseinfer step log"), warnings=log.warnings(label))


READERS = (
    Reader(
        TOOL, "roseinfer step logs (/debug/steps, ROSEINFER_STEP_LOG)", (".jsonl", ".ndjson"), sniff, read
    ),
)
