"""What the trace says about a token's window: the profiler's own work and CUDA-graph capture (tokens whose gap
holds them are left out of the ITL figures), and which region took a slow step's extra time (the evidence a
spike's cause is shown with).

The step log is on the engine's clock; the trace on the tool's. The offset between them comes from the decode
steps both hold (the step rows are the trace's `roseinfer.decode_step` ranges, joined to the log's records), so
this works for nsys and torch.profiler runs alike.
"""

from __future__ import annotations

import numpy as np

from roseprof.analysis.steps import log_record_index
from roseprof.model import Trace
from roseprof.workload.steplog import StepLogRecords

LEFT_OUT = {
    "profiler": "the profiler starting or writing its trace",
    "capture": "CUDA graph capture",
}
SPREAD = 0.5  # a region that took less than this share of a slow step's excess does not stand for it alone


def log_offset(log: StepLogRecords, rows: dict | None) -> float | None:
    """ns to add to a trace time to get the step log's time, from the steps both hold; None when unknown."""
    if not rows or not rows.get("start_ns") or not log.steps:
        return None
    index = rows.get("log_index", rows["index"])
    if len(index) != len(rows["start_ns"]):
        return None
    diffs = [
        log.steps[k]["start_ns"] - t
        for k, t in zip(index, rows["start_ns"])
        if isinstance(k, int) and 0 <= k < len(log.steps)
    ]
    return float(np.median(diffs)) if diffs else None


def left_out_tokens(
    log: StepLogRecords, rows: dict | None, trace: Trace | None, start: np.ndarray, end: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(reason [T]: "", "profiler" or "capture"; the ns of the window it took [T]) for token windows [start, end]
    on the log's clock. The profiler: a window holding the trace's first or last instant (the profiler starting,
    or writing its trace when a torch.profiler window ends), one of the engine's own profiler's switches, or a
    server capture window's start or close (the log's `profiler_pauses`); capture: a window in which CUDA graph
    nodes were made."""
    reason = np.full(len(start), "", dtype=object)
    took = np.zeros(len(start))
    offset = log_offset(log, rows) if trace is not None else None
    if not len(start):
        return reason, took
    _engine_profiler(log, start, end, reason, took)
    _window_pauses(log, start, end, reason, took)
    if offset is None:
        return reason, took
    times = [t for t in (trace.ranges.start, trace.ranges.end, trace.ops.start, trace.ops.end) if len(t)]
    if times:
        first = min(float(t.min()) for t in times) + offset
        last = max(float(t.max()) for t in times) + offset
        hit = (start < first) & (first < end)
        reason[hit], took[hit] = "profiler", (first - start)[hit]
        hit = (start < last) & (last < end)
        reason[hit], took[hit] = "profiler", (end - last)[hit]
    nodes = trace.graph_nodes
    if len(nodes):
        made = np.sort(nodes.start.astype(np.float64) + offset)
        inside = np.searchsorted(made, end) > np.searchsorted(made, start)
        hit = inside & (reason == "")
        reason[hit], took[hit] = "capture", (end - start)[hit]  # the engine waited for the capture
    return reason, took


def step_region_excess(
    rows: dict | None, region_cols: list[str], log_steps: list[dict]
) -> dict[int, tuple[str, float]]:
    """Per decode step (log index) slower than the median step: the region whose time grew most over its median,
    and by how much (ns); "(spread over the step)" when no region took SPREAD of the step's excess (machine
    noise: everything ran a little slower). The regions are the trace's; without them (a steps window, an
    imported flight recorder), the step log's own host time of each region, "REGION (host)", where every step
    has it (step log version 4, regions on: any device)."""
    n_log_steps = len(log_steps)
    if not n_log_steps:
        return {}
    if not rows or not rows.get("dur_ns"):  # no steps table: the log's steps are the rows
        rows = {"dur_ns": [s["end_ns"] - s["start_ns"] for s in log_steps], "index": list(range(n_log_steps))}
    index = log_record_index(rows, n_log_steps)  # the rows' log step
    if index is None:
        return {}
    dur = np.asarray(rows["dur_ns"], dtype=np.float64)
    excess = dur - np.median(dur)
    cols = {name: np.asarray(rows[f"region:{name}"], dtype=np.float64) for name in region_cols}
    if "rest_ns" in rows:
        cols["(host time between regions)"] = np.asarray(rows["rest_ns"], dtype=np.float64)
    for key in rows:
        if key.startswith("graph:"):  # a replay's GPU time, by the region its kernels were captured in
            cols[f"{key[len('graph:') :]} (GPU)"] = np.asarray(rows[key], dtype=np.float64)
    if not region_cols:
        cols.update(_log_host_cols(log_steps, index))
    if not cols:
        return {}
    deltas = {name: v - np.median(v) for name, v in cols.items()}
    typical = {name: float(np.median(v)) for name, v in cols.items()}
    out = {}
    for row in np.flatnonzero(excess > 0).tolist():
        k = int(index[row])
        if k < 0:
            continue
        grown = {n: float(deltas[n][row]) for n in deltas if deltas[n][row] > 0}  # NaN (no time) never grew
        if not grown:  # the step grew, but no region did (each at or under its median): nothing to name
            out[k] = ("(spread over the step)", float(excess[row]))
            continue
        most = max(grown.values())
        # Nested regions grow together (a forward and its lm_head): name the most specific one, the smallest
        # region that took nearly all of the growth.
        name = min((n for n in grown if grown[n] >= 0.8 * most), key=lambda n: typical[n])
        grew = grown[name]
        if grew >= SPREAD * excess[row]:
            out[k] = (name, grew)
        else:
            out[k] = ("(spread over the step)", float(excess[row]))
    return out


def _log_host_cols(log_steps: list[dict], index) -> dict[str, np.ndarray]:
    """`REGION (host)` -> its own host ns in each row's step (0 where it did not run), from the step log; none
    unless every row is a step that has them (a column with holes would pass a missing step for a quick one)."""
    if not all(0 <= k < len(log_steps) and "host_own_ns" in log_steps[k] for k in index):
        return {}
    owns = [log_steps[k]["host_own_ns"] for k in index]
    names = sorted({r for own in owns for r in own})
    return {f"{r} (host)": np.array([own.get(r, 0) for own in owns], dtype=np.float64) for r in names}


def _engine_profiler(log: StepLogRecords, start, end, reason, took) -> None:
    # The engine's own torch.profiler (its schedule in the log's meta): at the ends of `wait` (collecting starts),
    # `warmup` (recording starts) and `active` (the trace is written) decode steps the profiler works between
    # two steps; the tokens of the step on either side of each switch hold it.
    schedule = log.meta.get("torch_profile_schedule")
    if isinstance(schedule, list) and len(schedule) == 3 and all(isinstance(x, int) for x in schedule):
        wait, warmup, active = schedule
        for k in {wait, wait + warmup, wait + warmup + active}:
            if 0 < k < len(log.steps):
                switch = float(log.steps[k - 1]["end_ns"]), float(log.steps[k]["start_ns"])
                hit = (start <= switch[1]) & (end >= switch[0]) & (reason == "")
                reason[hit], took[hit] = "profiler", switch[1] - switch[0]


def _window_pauses(log: StepLogRecords, start, end, reason, took) -> None:
    # A server's capture window with a profiler (live/load_steps.py: the meta's `profiler_pauses`, by the server's
    # step number): the loop paused after a step (its tokens emitted) before the next began, and an export beside
    # the loop slows the steps it overlaps; a token whose gap overlaps that time waited for the profiler. What it
    # took of the gap is the pause's measured time in it (where in the time between the two steps the pause ran
    # is not recorded: from its start).
    first = log.first_step
    for pause in log.meta.get("profiler_pauses") or []:
        pos = pause["after_step"] - first
        if not 0 <= pos < len(log.steps):
            continue
        lo = pause_start(log, pos)
        measured = lo + (pause["loop_ms"] + pause["beside_ms"]) * 1e6
        hi = max(measured, float(log.steps[pos + 1]["start_ns"])) if pos + 1 < len(log.steps) else measured
        hit = (start < hi) & (end > lo) & (reason == "")
        reason[hit] = "profiler"
        took[hit] = np.clip(np.minimum(end, measured) - np.maximum(start, lo), 0, None)[hit]


def pause_start(log: StepLogRecords, pos: int) -> float:
    """When the loop could pause after the step at `pos`: once the step's tokens were emitted (after its end)."""
    emitted = [t for r in log.requests for t, k in zip(r["token_ns"], r["token_step"]) if k == pos]
    return float(max(emitted, default=log.steps[pos]["end_ns"]))


# The causes a step's extra time goes to (spikes.py), and how an event cause is named as evidence.
STEP_EVIDENCE = ("rollover", "cow", "batch_change", "preemption", "slow_step")  # evidence: a step's region
EVENTS = {
    "host": "host time between decode steps",
    "gc": "Python gc collections",
    "prefill": "prefill of new requests",
    "readmission": "prefill recomputing preempted requests",
    "kv_wait": "its request preempted, then recomputed",
    "unknown": "no record accounts for it",
}


def slowest_step(log: StepLogRecords, starts: np.ndarray, lo_ns: float, hi_ns: float, default: int) -> int:
    """The slowest step (its position in the log) that ran inside a token's window [lo_ns, hi_ns]: with the
    overlapped decode the window holds the step before the token's own too, and that one may be the slow one.
    `starts`: the log's step starts, sorted; `default` where no step ran inside."""
    lo = max(int(np.searchsorted(starts, lo_ns, side="right")) - 1, 0)
    hi = int(np.searchsorted(starts, hi_ns, side="left"))
    inside = [i for i in range(lo, hi) if log.steps[i]["end_ns"] > lo_ns]
    if not inside:
        return default
    return max(inside, key=lambda i: log.steps[i]["end_ns"] - log.steps[i]["start_ns"])


def evidence_of(
    cause: str, t: int, tok: dict, added_ns: float, where: dict, log: StepLogRecords, starts: np.ndarray
) -> tuple[str, float]:
    """(what took the time, ns) for a spike token's main cause: the region that grew most in the slowest step of
    its window (a step cause), or the event in its window. `starts`: the log's step starts, sorted."""
    k = int(tok["step"][t])
    if cause == "slow_step":
        k = slowest_step(log, starts, tok["start"][t], tok["end"][t], k)
    if cause in STEP_EVIDENCE:
        first = k == 0 or any(r.get("next_step") == k for r in log.run_starts)
        said = k + log.first_step  # a flight recorder's steps by the server's number
        what, ns = where.get(k, (f"decode step {said} (no trace to say where)", added_ns))
        return (f"first step of a run: {what}" if first else what, ns)
    return (EVENTS.get(cause, cause), added_ns)
