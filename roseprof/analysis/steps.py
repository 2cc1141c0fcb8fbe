"""Decode steps: the step log joined to the `roseinfer.decode_step` ranges, rollover vs normal, ITL.

The k-th step record of the engine's log is the k-th `roseinfer.decode_step` range of the same run (both
come from the same code path, once per step). Without a step log, a step is a rollover step when a
`roseinfer.kv.rollover` mark falls inside it or between it and the next step.

When the counts differ because the profiler saw only a window of steps (torch.profiler's schedule), and the
trace's clock is known (Unix time for torch.profiler, the step log's meta records a Unix/monotonic pair), each
range is joined to the record whose [start_ns, end_ns] holds the range's middle, by time, not by index.
A program with no `roseinfer.decode_step` ranges and no step log gets its steps from torch.profiler's
`ProfilerStep#N` spans (the reader names them `ProfilerStep`).
"""

from __future__ import annotations

import numpy as np

from roseprof.analysis.stats import ms_stats, ns_stats
from roseprof.workload.roseinfer import DECODE_STEP, ROLLOVER_MARK
from roseprof.workload.steplog import StepLogRecords

PROFILER_STEP = (
    "ProfilerStep"  # torch.profiler's step spans (ProfilerStep#N), as the Kineto reader names them
)


def step_of_program(names, has_log: bool, step_range: str | None) -> str:
    """The range that is one step: the user's --step-range; the engine's decode step; else torch.profiler's
    ProfilerStep, when the program called prof.step()."""
    if step_range:
        return step_range
    if DECODE_STEP not in names and not has_log and PROFILER_STEP in names:
        return PROFILER_STEP
    return DECODE_STEP


def step_kind(step_name: str, has_log: bool) -> str:
    """ "decode" (the engine's decode steps: rollovers and ITL apply), "profiler" or "range" (a program's)."""
    if has_log or step_name == DECODE_STEP:
        return "decode"
    return "profiler" if step_name == PROFILER_STEP else "range"


def clock_offset(trace_clock: str | None, session_start_utc_ns: int | None, log: StepLogRecords | None):
    """ns to add to a trace time to get the step log's time (monotonic_ns), or None when it cannot be known.

    Only for a trace on Unix time whose step log recorded a (realtime_ns, monotonic_ns) pair taken together.
    """
    if trace_clock != "realtime" or session_start_utc_ns is None or log is None:
        return None
    real, mono = log.meta.get("realtime_ns"), log.meta.get("monotonic_ns")
    if not isinstance(real, int) or not isinstance(mono, int):
        return None
    return session_start_utc_ns - (real - mono)


def join_by_time(start, end, log_steps: list[dict], offset: int) -> np.ndarray:
    """[S] the index of the step record holding each range's middle (on the log's clock), -1 where none does."""
    rec_start = np.asarray([s["start_ns"] for s in log_steps], dtype=np.int64)
    rec_end = np.asarray([s["end_ns"] for s in log_steps], dtype=np.int64)
    mid = (start + end) // 2 + offset
    k = np.searchsorted(rec_start, mid, side="right") - 1
    ok = (k >= 0) & (mid <= rec_end[np.maximum(k, 0)])
    return np.where(ok, k, -1)


def step_table(
    names,
    start,
    end,
    name_idx,
    parent,
    depth,
    marks_ts,
    marks_name,
    log: StepLogRecords | None,
    warnings,
    log_offset_ns: int | None = None,
    step_range: str | None = None,
    step_mask: np.ndarray | None = None,
):
    """Per-step rows: index, start_ns, dur_ns, rollovers, batch_size, cow, and ns per region inside the step.

    Returns (rows dict of lists, region names in column order) or (None, []) when the run has no steps.
    Rows joined to the log by time also carry "log_index" (the record of each row; -1: none).
    `step_range` names the range that is a step in a program that is not the engine (--step-range).
    `step_mask` [R] bool: the ranges that may be steps (one rank's, in a run of several ranks; None: all).
    """
    log_steps = log.steps if log is not None else []
    step_name = step_of_program(names, bool(log_steps), step_range)
    decode_id = names.index(step_name) if step_name in names else -1
    is_step = name_idx == decode_id if decode_id >= 0 else np.zeros(len(name_idx), dtype=bool)
    step_ranges = np.flatnonzero(is_step if step_mask is None else is_step & step_mask)
    step_ranges = step_ranges[np.argsort(start[step_ranges], kind="stable")]
    if step_range and not len(step_ranges):
        warnings.append(f"--step-range {step_range}: the trace has no range of that name, so no steps")
    if len(step_ranges) == 0 and not log_steps:
        return None, []
    joined = len(step_ranges) > 0 and len(log_steps) == len(step_ranges)
    if len(step_ranges) and log_steps and not joined and log_offset_ns is not None:
        log_index = join_by_time(start[step_ranges], end[step_ranges], log_steps, log_offset_ns)
        if (log_index >= 0).any():
            return _time_joined(
                names, start, end, name_idx, parent, depth, step_ranges, log_steps, log_index, warnings
            )
    if len(step_ranges) and log_steps and not joined:
        warnings.append(
            f"step log has {len(log_steps)} steps but the trace has {len(step_ranges)} {DECODE_STEP} ranges "
            "(a capture range or an interrupted run?): step times come from the trace, rollovers from marks"
        )
    rows: dict[str, list] = {}
    if len(step_ranges):
        rows["start_ns"] = start[step_ranges].tolist()
        rows["dur_ns"] = (end[step_ranges] - start[step_ranges]).tolist()
    else:
        rows["start_ns"] = [s["start_ns"] for s in log_steps]
        rows["dur_ns"] = [s["end_ns"] - s["start_ns"] for s in log_steps]
    n = len(rows["dur_ns"])
    rows["index"] = list(range(n))
    if joined or not len(step_ranges):
        rows["rollovers"] = [int(s.get("rollovers", 0)) for s in log_steps]
        rows["batch_size"] = [int(s.get("batch_size", 0)) for s in log_steps]
        rows["cow"] = [int(s.get("cow", 0)) for s in log_steps]
    else:
        rollovers = np.zeros(n, dtype=np.int64)
        rollover_id = names.index(ROLLOVER_MARK) if ROLLOVER_MARK in names else -1
        if rollover_id >= 0 and n:
            ts = marks_ts[marks_name == rollover_id]
            owner = np.searchsorted(np.asarray(rows["start_ns"]), ts, side="right") - 1
            np.add.at(rollovers, owner[owner >= 0], 1)
        rows["rollovers"] = rollovers.tolist()
    if joined or not len(step_ranges):
        cpu_columns(rows, log_steps, range(n))
    region_cols = _step_regions(rows, names, start, end, name_idx, parent, depth, step_ranges)
    return rows, region_cols


def log_record_index(rows: dict, n_log_steps: int) -> list[int] | None:
    """Each row's step-log record: `log_index` (rows joined to the log by time: a torch.profiler window), else the
    row's own index where the rows are the log's steps (as many of them); None where neither holds."""
    index = rows.get("log_index") or (rows["index"] if len(rows["dur_ns"]) == n_log_steps else None)
    return index if index is not None and len(index) == len(rows["dur_ns"]) else None


CPU_PREFIX = "cpu:"  # steps-table column of a region's own thread CPU ns per step (step log version 3)
WAIT = "wait_ns"  # steps-table column of the step's waits for a core, its thread's run delay (version 5)


def cpu_columns(rows: dict, log_steps: list[dict], index) -> None:
    """Adds the step log's CPU times to `rows` (row i is log record index[i]): `cpu_ns`, the step's thread CPU
    time, `cpu:REGION`, each region's own CPU time in the step (0 in a step it did not run in), and `wait_ns`, the
    step's waits for a core (roseinfer/run_delay.py), where the log has them. Only when
    every row has a record with them: a column with holes would pass a missing step for a free one."""
    index = list(index)
    if not index or any(k < 0 or "cpu_own_ns" not in log_steps[k] for k in index):
        return
    records = [log_steps[k] for k in index]
    rows["cpu_ns"] = [r["cpu_ns"] for r in records]
    if all("wait_ns" in r for r in records):  # step log version 5, where the kernel counts it
        rows[WAIT] = [r["wait_ns"] for r in records]
    for name in sorted({name for r in records for name in r["cpu_own_ns"]}):
        rows[CPU_PREFIX + name] = [r["cpu_own_ns"].get(name, 0) for r in records]


def cpu_regions(rows: dict | None) -> list[str]:
    """The regions a steps table has CPU own times for (none for runs captured with regions off or before
    step log version 3)."""
    return [c[len(CPU_PREFIX) :] for c in rows or {} if c.startswith(CPU_PREFIX)]


def _time_joined(names, start, end, name_idx, parent, depth, step_ranges, log_steps, log_index, warnings):
    n = len(step_ranges)
    unmatched = int((log_index < 0).sum())
    if unmatched:
        warnings.append(f"{unmatched} of {n} {DECODE_STEP} ranges match no step log record by time")
    rows: dict[str, list] = {
        "start_ns": start[step_ranges].tolist(),
        "dur_ns": (end[step_ranges] - start[step_ranges]).tolist(),
        "index": log_index.tolist(),  # the engine's own step numbers: the window's first step is not step 0
        "log_index": log_index.tolist(),
    }
    for key in ("rollovers", "batch_size", "cow"):
        rows[key] = [int(log_steps[k].get(key, 0)) if k >= 0 else 0 for k in log_index.tolist()]
    cpu_columns(rows, log_steps, log_index.tolist())
    region_cols = _step_regions(rows, names, start, end, name_idx, parent, depth, step_ranges)
    return rows, region_cols


def _step_regions(rows, names, start, end, name_idx, parent, depth, step_ranges) -> list[str]:
    """Adds the ns of every region inside each step to `rows` (and the step time no child covers)."""
    n = len(rows["dur_ns"])
    region_cols: list[str] = []
    if len(step_ranges):
        # For every range, the decode step it sits in (climb parents, vectorised over all ranges).
        step_of_range = np.full(len(start), -1, dtype=np.int64)
        step_of_range[step_ranges] = np.arange(n)
        anc = parent.copy()
        owner = np.full(len(start), -1, dtype=np.int64)
        for _ in range(int(depth.max()) + 1 if len(depth) else 0):
            live = anc >= 0
            if not live.any():
                break
            hit = live & (owner < 0)
            hit[hit] = step_of_range[anc[hit]] >= 0
            owner[hit] = step_of_range[anc[hit]]
            anc[live] = parent[anc[live]]
        inside = np.flatnonzero(owner >= 0)
        col_ids = np.unique(name_idx[inside])
        region_cols = [names[i] for i in col_ids]
        matrix = np.zeros((n, len(col_ids)), dtype=np.int64)
        cols = np.searchsorted(col_ids, name_idx[inside])  # each range's column (col_ids: sorted, distinct)
        np.add.at(matrix, (owner[inside], cols), end[inside] - start[inside])
        for j, name in enumerate(region_cols):
            rows[f"region:{name}"] = matrix[:, j].tolist()
        # Step time not covered by any direct child range.
        direct = inside[parent[inside] == step_ranges[owner[inside]]]
        covered = np.zeros(n, dtype=np.int64)
        np.add.at(covered, owner[direct], end[direct] - start[direct])
        rows["rest_ns"] = (np.asarray(rows["dur_ns"]) - covered).tolist()
    return region_cols


def steps_summary(rows: dict, region_cols: list[str], graph_cols: list[str] = ()) -> dict:
    """Step times overall and for rollover vs normal steps, with the mean (and median) ns per region inside
    the step; with graph replays attributed (graph_cols), also the mean GPU ns per capture-time region (each
    kernel's own time on its stream, `graphs.step_graph_columns`)."""
    dur = np.asarray(rows["dur_ns"], dtype=np.float64)
    is_roll = np.asarray(rows["rollovers"]) > 0
    out = ns_stats(dur)
    for label, mask in (("rollover", is_roll), ("normal", ~is_roll)):
        group = ns_stats(dur[mask])
        group["regions"] = {
            name: float(np.mean(np.asarray(rows[f"region:{name}"])[mask])) if mask.any() else None
            for name in region_cols
        }
        if "rest_ns" in rows:
            group["regions"]["(rest)"] = (
                float(np.mean(np.asarray(rows["rest_ns"])[mask])) if mask.any() else None
            )
        # Medians too: one preempted or page-faulting step can move a mean over a handful of rollover steps.
        group["regions_p50"] = {
            name: float(np.median(np.asarray(rows[f"region:{name}"])[mask])) if mask.any() else None
            for name in region_cols
        }
        if graph_cols:
            group["graph_regions"] = {
                name: float(np.mean(np.asarray(rows[f"graph:{name}"])[mask])) if mask.any() else None
                for name in graph_cols
            }
        out[label] = group
    # The region whose mean time grows most in rollover steps (mean_ns < 0 when every region is faster there).
    # It says where rollover steps spend extra time, not that they are slower: that is rollover.mean_ns against
    # normal.mean_ns (render/text.py: rollover_sentence words both).
    if is_roll.any() and (~is_roll).any() and region_cols:
        diffs = {
            name: out["rollover"]["regions"][name] - out["normal"]["regions"][name]
            for name in region_cols + (["(rest)"] if "rest_ns" in rows else [])
        }
        name = max(diffs, key=diffs.get)
        out["rollover_excess"] = {"region": name, "mean_ns": diffs[name]}
    return out


def request_metrics(
    log: StepLogRecords | None, step_rollovers: list[int] | None, left_out: list[list] | None = None
) -> tuple[dict | None, dict | None]:
    """(itl summary, request summary) from the step log's per-token times. `left_out`: per request, per token
    after the first, a reason to leave its ITL out (the profiler's own work, CUDA-graph capture) or None."""
    if log is None or not log.requests:
        return None, None
    itl_all, itl_roll, itl_else, ttft, tpot = [], [], [], [], []
    completion = 0
    first_arrival = min(r["arrival_ns"] for r in log.requests)
    last_token = first_arrival
    rolls = np.asarray(step_rollovers if step_rollovers is not None else [], dtype=np.int64)
    for ri, r in enumerate(log.requests):
        t = np.asarray(r["token_ns"], dtype=np.int64)
        completion += len(t)
        if len(t) == 0:
            continue
        last_token = max(last_token, int(t[-1]))
        ttft.append((t[0] - r["arrival_ns"]) / 1e6)
        if len(t) > 1:
            gaps = np.diff(t) / 1e6
            tpot.append((t[-1] - t[0]) / 1e6 / (len(t) - 1))
            steps = np.asarray(r["token_step"][1:], dtype=np.int64)
            if left_out and ri < len(left_out) and len(left_out[ri]) == len(gaps):
                keep = np.array([w is None for w in left_out[ri]], dtype=bool)
                gaps, steps = gaps[keep], steps[keep]
            itl_all.extend(gaps.tolist())
            known = (steps >= 0) & (steps < len(rolls))
            at_roll = np.zeros(len(steps), dtype=bool)
            at_roll[known] = rolls[steps[known]] > 0
            itl_roll.extend(gaps[at_roll].tolist())
            itl_else.extend(gaps[~at_roll].tolist())
    itl = ms_stats(itl_all)
    itl["at_rollover"] = ms_stats(itl_roll)
    itl["elsewhere"] = ms_stats(itl_else)
    span_s = max(last_token - first_arrival, 1) / 1e9
    requests = {
        "count": len(log.requests),
        "completion_tokens": completion,
        "throughput_tok_s": completion / span_s,
        "ttft": ms_stats(ttft),
        "tpot": ms_stats(tpot),
    }
    return itl, requests


def itl_series(
    log: StepLogRecords | None, step_rollovers: list[int] | None, left_out: list[list] | None = None
) -> list[dict]:
    """Per request: token index, time since the first arrival (ms), ITL (ms), whether at a rollover step."""
    if log is None or not log.requests:
        return []
    t0 = min(r["arrival_ns"] for r in log.requests)
    rolls = step_rollovers or []
    out = []
    for ri, r in enumerate(log.requests):
        t = r["token_ns"]
        steps = r["token_step"]
        out.append(
            {
                "id": r["id"],
                "t_ms": [(x - t0) / 1e6 for x in t[1:]],
                "itl_ms": [(b - a) / 1e6 for a, b in zip(t, t[1:])],
                "rollover": [0 <= s < len(rolls) and rolls[s] > 0 for s in steps[1:]],
                "step": list(steps[1:]),  # the decode step that produced each token (-1: prefill)
                "ttft_ms": (t[0] - r["arrival_ns"]) / 1e6 if len(t) else None,
            }
        )
        if left_out and ri < len(left_out) and any(left_out[ri]):
            out[-1]["left_out"] = left_out[ri]  # why a token is not in the ITL figures (None: it is)
    return out


def run_starts(log: StepLogRecords | None, n_steps: int) -> list[dict]:
    """Where each benchmark run (warm-up or measured) begins, from the step log's run_start records:
    [{"run": r, "step": first decode step index (None when the steps are not the log's), "t_ms": time since
    the first request's arrival, as the ITL series}]. A benchmark with --repeat-runs 3 captures several runs
    back to back; without these the charts join them with no boundary."""
    if log is None or not log.run_starts:
        return []
    step_starts = np.asarray([s["start_ns"] for s in log.steps], dtype=np.int64)
    steps_are_the_logs = len(log.steps) == n_steps
    t0 = min(r["arrival_ns"] for r in log.requests) if log.requests else None
    out = []
    for i, rec in enumerate(sorted(log.run_starts, key=lambda r: r["ts_ns"])):
        first = int(np.searchsorted(step_starts, rec["ts_ns"], side="left"))
        out.append(
            {
                "run": int(rec.get("run", i)),
                "step": first if steps_are_the_logs and first < n_steps else None,
                "t_ms": (rec["ts_ns"] - t0) / 1e6 if t0 is not None else None,
            }
        )
    return out
