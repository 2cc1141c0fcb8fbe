"""`roseprof request RUN ID`: one request of a live run, token by token, with the server step of each (the run's
step log: the load's own records, live/load_steps.py) and, under a slow step, what grew in it."""

from __future__ import annotations

import re

import numpy as np

from roseprof.live.join import SLOW_STEP, RegionGrowth, grown_words
from roseprof.render.wrap import wrap_words
from roseprof.workload.steplog import StepLogRecords


def timeline(log: StepLogRecords, tokens: list[dict], ref: str, detail: dict | None = None) -> list[str]:
    """One request's lines (`roseprof request`): queued, prefill, each token with its step, the step's batch size
    and wall time, and under a slow one (SLOW_STEP) the region that grew where the step log's region times show
    one (RegionGrowth),
    and the step's top kernels and regions where `detail` (a torch window's, by step: live/step_detail.py) has
    the step. `ref`: the response id, or the request's index in the load."""
    from roseprof.errors import RoseprofError
    from roseprof.live.step_detail import words

    row = next((r for r in tokens if r["request_id"] == ref or str(r["index"]) == ref), None)
    if row is None:
        raise RoseprofError(f"no request {ref!r} in this run (give a response id cmpl-... or an index)")
    record = next((r for r in log.requests if r.get("request_id") == row["request_id"]), None)
    first = log.first_step
    rid = row["request_id"]
    lines = [  # two lines: a response id is 38 characters, and a line fits 80 columns
        f"request {rid} (index {row['index']})",
        f"  sent at {row['sent_ms']:.1f} ms, {len(row['t_ms'])} tokens",
    ]
    prefill = None
    if record is not None:
        prefill = next((p for p in log.prefills if record["id"] in p.get("requests", [])), None)
    if prefill is not None:
        queued = (prefill["start_ns"] - record["arrival_ns"]) / 1e6
        took = (prefill["end_ns"] - prefill["start_ns"]) / 1e6
        lines.append(f"  queued   {queued:9.2f} ms  (server: arrival to its prefill)")
        lines.append(
            f"  prefill  {took:9.2f} ms  {prefill.get('tokens', 0)} tokens, {prefill.get('batch_size', 1)} request(s)"
        )
    else:
        lines.append("  queued, prefill: before the server's recorder held (no longer there)")
    lines.append("  token    client ms      gap ms   step   batch   step ms")
    growth = RegionGrowth(log)
    median = float(np.median([_wall(s) for s in log.steps])) if log.steps else 0.0
    previous = row["sent_ms"]
    for i, (t, step) in enumerate(zip(row["t_ms"], row["steps"])):
        pos = step - first if isinstance(step, int) and step >= 0 else None
        if step is not None and step < 0:
            where = "   prefill"
        elif pos is not None and 0 <= pos < len(log.steps):
            s = log.steps[pos]
            where = f"{step:7d} {s['batch_size']:7d} {(s['end_ns'] - s['start_ns']) / 1e6:9.2f}"
        else:
            where = f"{'-' if step is None else step:>7} (outside the window)"
        lines.append(f"  {i:5d} {t:12.2f} {t - previous:11.2f} {where}")
        slow = pos is not None and 0 <= pos < len(log.steps) and _wall(log.steps[pos]) >= SLOW_STEP * median
        grown = growth.at(pos) if slow else None
        if grown is not None:  # a slow step's region, from the step log's region times (no profiler needed)
            lines += wrap_words(grown_words(grown), 80, INDENT, INDENT + "  ")
        said = words((detail or {}).get(str(step))) if step is not None and step >= 0 else ""
        if said:
            lines += _under_the_token(said)
        previous = t
    return lines


INDENT = " " * 8  # a line about a token's step, under the token


def _under_the_token(said: str) -> list[str]:
    """A step's top kernels and regions (step_detail.words), wrapped to 80 columns between its items: a kernel's
    name never parted from its time (a line that starts with a figure would read as a token's), one longer than a
    line alone on its own."""
    items = tuple(re.split(r"(?<=[,;]) ", said))
    return wrap_words(said, 80, INDENT, INDENT + "  ", keep=items)


def _wall(step: dict) -> int:
    return step["end_ns"] - step["start_ns"]
