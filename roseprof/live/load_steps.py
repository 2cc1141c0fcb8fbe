"""The load's own decode steps in a snapshot of the server's flight recorder (GET /debug/steps), as the step log
a live run's step figures are made of.

A long-running server's recorder also holds the steps of what it served before the load (an earlier load, other
clients) and after it. Each client token carries the step that emitted it (roseinfer's `token_steps`), so the
load's steps are known: from the step of its first decode token to the step of its last, every step between
included (other clients' requests in them shared them with the load). The snapshot is kept whole, as the server
sent it, in the run's raw/steps.jsonl; the run's step log (steplog.jsonl) holds the records of the load's steps,
and every figure of the run (decode steps, ITL and its spikes, the slowest requests, `roseprof request`, the
dashboard's step timeline) reads that one.

A capture window with a profiler (torch, nsys) pauses the engine loop as it opens and closes (its `pause`:
roseinfer/serve/windows.py); the step log's meta record says where (`profiler_pauses`), so that a token whose gap
holds one is put down to the profiler, never to a decode step (analysis/spike_evidence.py, live/join.py).
"""

from __future__ import annotations

import json
from pathlib import Path

PROFILER_TOOLS = ("torch", "nsys")  # the window tools whose start and close pause the engine loop
TIMED = {
    "prefill": "start_ns",
    "gc": "start_ns",
    "preempt": "t_ns",
    "run_start": "ts_ns",
}  # record -> its time


def load_span(tokens: list[dict]) -> tuple[int, int] | None:
    """(first, last): the server's steps of the load's first and last decode tokens (None: no token names one)."""
    steps = [s for row in tokens for s in row["steps"] if isinstance(s, int) and s >= 0]
    return (min(steps), max(steps)) if steps else None


def window_pauses(window: dict | None) -> list[dict]:
    """Where a closed window with a profiler paused the engine loop: before its first step (the profiler's start)
    and after its last (the profiler's stop and the flight recorder's dump on the loop, then the export beside it
    on a thread of the engine's process, which slows the steps it overlaps)."""
    if not window or window.get("tool") not in PROFILER_TOOLS or not window.get("steps_done"):
        return []
    p, tool = window.get("pause") or {}, window["tool"]
    first = window["first_step"]
    last = first + window["steps_done"] - 1
    return [
        {"after_step": first - 1, "what": f"the {tool} window's start", "loop_ms": p.get("start_ms") or 0.0,
         "beside_ms": 0.0},
        {"after_step": last, "what": f"the {tool} window's close",
         "loop_ms": (p.get("stop_ms") or 0.0) + (p.get("dump_ms") or 0.0), "beside_ms": p.get("export_ms") or 0.0},
    ]  # fmt: skip


def cut_to_load(snapshot: Path, out: Path, tokens: list[dict], pauses: list[dict] = ()) -> dict:
    """Writes to `out` the snapshot's records of the load's steps (load_span), as a step log: the meta record
    (with `load_steps` and the window's `profiler_pauses`), those steps, the prefills, collections and
    preemptions after the step before the first one up to the end of the last, and each request's tokens of those
    steps and prefills (a request with none is left out). Returns what the snapshot held against what was kept:
    {"snapshot", "kept", "before", "after"} in steps; nothing is written where no step of the load is there."""
    records = [_record(line) for line in snapshot.read_bytes().splitlines() if line.strip()]
    steps = {r["index"]: r for r in records if _is_step(r)}
    span = load_span(tokens)
    kept = [k for k in steps if span and span[0] <= k <= span[1]]
    first, last = (min(kept), max(kept)) if kept else (None, None)
    said = {
        "snapshot": len(steps),
        "kept": len(kept),
        "before": sum(k < first for k in steps) if kept else 0,
        "after": sum(k > last for k in steps) if kept else 0,
    }
    if not kept:
        return said
    before = steps.get(first - 1)
    lo = before["end_ns"] if before else float("-inf")  # what ran after the step before the load's first
    hi = steps[last]["end_ns"]
    lines = []
    for r in records:
        if not isinstance(r, dict):
            lines.append(r)  # a line that is no record stays, for the reader to count as it would have
        elif r.get("type") == "meta":
            lines.append({**r, "load_steps": said, "profiler_pauses": list(pauses)})
        elif _is_step(r):
            if first <= r["index"] <= last:
                lines.append(r)
        elif r.get("type") == "request":
            cut = _request_tokens(r, first, last, lo, hi)
            if cut is not None:
                lines.append(cut)
        elif r.get("type") in TIMED:
            t = r.get(TIMED[r["type"]])
            if not isinstance(t, int) or lo < t <= hi:
                lines.append(r)
        else:
            lines.append(r)  # a record of a type this reader does not know (a newer engine's): left as it is
    out.write_bytes(b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in lines))
    return said


def _record(line: bytes) -> dict | bytes:
    try:
        rec = json.loads(line)
    except ValueError:
        return line
    return rec if isinstance(rec, dict) else line


def _is_step(r) -> bool:
    return isinstance(r, dict) and r.get("type") == "step" and isinstance(r.get("index"), int)


def _request_tokens(r: dict, first: int, last: int, lo: float, hi: int) -> dict | None:
    """The request with its tokens of steps first..last and of the prefills between lo and hi (None: none)."""
    times, steps = r.get("token_ns"), r.get("token_step")
    if not isinstance(times, list) or not isinstance(steps, list) or len(times) != len(steps):
        return r  # a damaged record: the reader says so, as it would have
    keep = [
        i
        for i, (t, k) in enumerate(zip(times, steps))
        if isinstance(k, int) and (first <= k <= last or (k < 0 and isinstance(t, int) and lo < t <= hi))
    ]
    if not keep:
        return None
    return {**r, "token_ns": [times[i] for i in keep], "token_step": [steps[i] for i in keep]}
