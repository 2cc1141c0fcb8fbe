"""The load's own decode steps in a snapshot of the server's flight recorder (GET /debug/steps), as the step log
a live run's step figures are made of.

A long-running server's recorder also holds the steps of what it served before the load (an earlier load, other
clients) and after it. Each client token carries the step that emitted it (roseinfer's `token_steps`), so the
load's steps are known: from the step of its first decode token to the step of its last, every step between
included (other clients' requests in them shared them with the load: the steps stay whole, the batch is what it
was). Of the requests, the log keeps the load's alone: the run's ITL, spike and rollover figures are the load's
tokens', the population its client figures are made of (another client's tokens in the same steps would move
the server's p99 with lengths and arrivals that are not the load's). The snapshot is kept whole, as the server
sent it, in the run's raw/steps.jsonl; the run's step log (steplog.jsonl) holds the load's records, and every
figure of the run (decode steps, ITL and its spikes, the slowest requests, `roseprof request`, the dashboard's
step timeline) reads that one. A load that streamed no decode token (each request's one token its prefill's:
--output-len 1) has no step of its own: its log holds its requests and their prefills, which its TTFT lines
read.

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


PAUSE_KEYS = ("start_ms", "stop_ms", "dump_ms", "export_ms")


def window_pauses(window: dict | None) -> list[dict]:
    """Where a closed window with a profiler paused the engine loop: before its first step (the profiler's start)
    and after its last (the profiler's stop and the flight recorder's dump on the loop, then the export beside it
    on a thread of the engine's process, which slows the steps it overlaps). A window on every tensor-parallel
    rank (its `ranks`) paused the loop as long as its slowest rank did: the ranks run in lockstep."""
    if not window or window.get("tool") not in PROFILER_TOOLS or not window.get("steps_done"):
        return []
    tool = window["tool"]
    each = [r.get("pause") or {} for r in window.get("ranks") or []] or [window.get("pause") or {}]
    p = {k: max((q.get(k) or 0.0 for q in each), default=0.0) for k in PAUSE_KEYS}
    first = window["first_step"]
    last = first + window["steps_done"] - 1
    return [
        {"after_step": first - 1, "what": f"the {tool} window's start", "loop_ms": p["start_ms"], "beside_ms": 0.0},
        {"after_step": last, "what": f"the {tool} window's close", "loop_ms": p["stop_ms"] + p["dump_ms"],
         "beside_ms": p["export_ms"]},
    ]  # fmt: skip


def cut_to_load(snapshot: Path, out: Path, tokens: list[dict], pauses: list[dict] = ()) -> dict:
    """Writes to `out` the snapshot's records of the load, as a step log: the meta record (with `load_steps` and
    the window's `profiler_pauses`), the load's steps (load_span), the prefills, collections and preemptions
    after the snapshot's step before the first one up to the end of the last (with no step of the load: from the
    first of its requests' arrivals to the last of their tokens), every prefill of the load's requests, and the
    load's requests (by their response ids) with their tokens of those steps and their prefills' (a request with
    none is left out). Returns what the snapshot held against what was kept: {"snapshot", "kept", "before",
    "after"} in steps, and "requests": the load's request records kept."""
    records = [_record(line) for line in snapshot.read_bytes().splitlines() if line.strip()]
    steps = {r["index"]: r for r in records if _is_step(r)}
    span = load_span(tokens)
    kept = sorted(k for k in steps if span and span[0] <= k <= span[1])
    ids = {row.get("request_id") for row in tokens} - {None}
    mine = [r for r in records if _is_request(r) and r.get("request_id") in ids]
    seqs, is_mine = {r.get("id") for r in mine}, {id(r) for r in mine}
    said = {
        "snapshot": len(steps),
        "kept": len(kept),
        "before": sum(k < kept[0] for k in steps) if kept else 0,
        "after": sum(k > kept[-1] for k in steps) if kept else 0,
    }
    first, last = (kept[0], kept[-1]) if kept else (None, None)
    if kept:
        before = max((k for k in steps if k < first), default=None)  # the snapshot may lack step first - 1
        lo = steps[before]["end_ns"] if before is not None else float("-inf")
        hi = steps[last]["end_ns"]
    else:  # no step of the load: the time its requests were at the server
        times = [t for r in mine for t in [r.get("arrival_ns"), *(r.get("token_ns") or [])] if _is_int(t)]
        lo, hi = (min(times) - 1, max(times)) if times else (0, -1)
    lines, n_requests = [], 0
    for r in records:
        if not isinstance(r, dict):
            lines.append(r)  # a line that is no record stays, for the reader to count as it would have
        elif r.get("type") == "meta":
            lines.append({**r, "load_steps": said, "profiler_pauses": list(pauses)})
        elif _is_step(r):
            if kept and first <= r["index"] <= last:
                lines.append(r)
        elif r.get("type") == "request":
            # the load's requests (a damaged record too: the reader counts it as it would have)
            cut = _request_tokens(r, first, last) if id(r) in is_mine or not _is_request(r) else None
            if cut is not None:
                lines.append(cut)
                n_requests += id(r) in is_mine
        elif r.get("type") == "prefill" and set(_ints(r.get("requests"))) & seqs:
            lines.append(r)  # a prefill of the load's requests, whenever it ran
        elif r.get("type") in TIMED:
            t = r.get(TIMED[r["type"]])
            if not isinstance(t, int) or lo < t <= hi:
                lines.append(r)
        else:
            lines.append(r)  # a record of a type this reader does not know (a newer engine's): left as it is
    out.write_bytes(b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in lines))
    return {**said, "requests": n_requests}


def _record(line: bytes) -> dict | bytes:
    try:
        rec = json.loads(line)
    except ValueError:
        return line
    return rec if isinstance(rec, dict) else line


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _ints(v) -> list:
    return [x for x in v if _is_int(x)] if isinstance(v, list) else []


def _is_step(r) -> bool:
    return isinstance(r, dict) and r.get("type") == "step" and isinstance(r.get("index"), int)


def _is_request(r) -> bool:
    return isinstance(r, dict) and r.get("type") == "request" and isinstance(r.get("request_id"), str)


def _request_tokens(r: dict, first: int | None, last: int | None) -> dict | None:
    """The request with its tokens of steps first..last and of its prefills (None: none; first None: no step)."""
    times, steps = r.get("token_ns"), r.get("token_step")
    if not isinstance(times, list) or not isinstance(steps, list) or len(times) != len(steps):
        return r  # a damaged record: the reader says so, as it would have
    keep = [
        i for i, k in enumerate(steps) if _is_int(k) and (k < 0 or (first is not None and first <= k <= last))
    ]
    if not keep:
        return None
    return {**r, "token_ns": [times[i] for i in keep], "token_step": [steps[i] for i in keep]}
