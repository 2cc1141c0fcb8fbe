"""What each decode step of a torch window did: its top kernels and its top regions, by the engine's step number,
for `show` (the slowest requests' steps) and `roseprof request` (each token's step).

A step is one `roseinfer.decode_step` range of the window's trace (the steps table's rows, joined to the window's
step log: the same N steps). Its kernels are the GPU ops launched inside it (by their launching call's time: with
the overlapped decode a step's kernels run after its host range ends), summed by name; on a CPU engine there are
none, and torch.profiler's CPU operators (aten::*) are the step's kernels, by their self CPU time (as
key_averages counts it). Its regions are the engine's regions inside it by their own time (less the regions nested
in them), so a region that holds others does not hide them.
"""

from __future__ import annotations

import numpy as np

from roseprof.analysis.sections.operators import CPU_OP
from roseprof.analysis.sections.operators import _nest as nest
from roseprof.model import Trace
from roseprof.workload.roseinfer import DECODE_STEP

TOP = 3  # kernels and regions named per step


def step_detail(
    trace: Trace, rows: dict | None, first_step: int, pids: list[int] | None = None
) -> dict[str, dict]:
    """{engine step (str, a JSON key): {"kernels": [[name, ns], ...], "kernel_kind": "gpu"|"cpu_op",
    "regions": [[name, ns], ...]}} for each step row; empty without rows. `pids`: only these processes' events
    (a window of several ranks: the rows are rank 0's steps, and every rank runs each step alike)."""
    if not rows or not rows.get("start_ns"):
        return {}
    start = np.asarray(rows["start_ns"], dtype=np.int64)
    end = start + np.asarray(rows["dur_ns"], dtype=np.int64)
    index = rows.get("log_index") or rows["index"]
    kernels, kind = _kernels(trace, start, end, pids)
    regions = _regions(trace, start, end, pids)
    out = {}
    for i, k in enumerate(index):
        if k is None or k < 0:
            continue
        out[str(first_step + int(k))] = {"kernels": kernels[i], "kernel_kind": kind, "regions": regions[i]}
    return out


def _top(owner, names, ns, n_steps: int, trace: Trace) -> list[list]:
    """Per step, the TOP names by summed ns of the events `owner` gives a step (-1: none)."""
    out: list[list] = [[] for _ in range(n_steps)]
    keep = owner >= 0
    owner, names, ns = owner[keep], names[keep], ns[keep]
    for s in np.unique(owner).tolist():
        sel = owner == s
        uniq, inv = np.unique(names[sel], return_inverse=True)
        sums = np.bincount(inv, weights=ns[sel])
        order = np.argsort(-sums)[:TOP]
        out[s] = [[trace.names[int(uniq[j])], int(sums[j])] for j in order.tolist()]
    return out


def _owner(t, start, end) -> np.ndarray:
    """[E] the step (row) whose [start, end) holds each time, -1 where none does (steps do not overlap)."""
    k = np.searchsorted(start, t, side="right") - 1
    ok = (k >= 0) & (t < end[np.maximum(k, 0)])
    return np.where(ok, k, -1)


def _mine(trace: Trace, tids: np.ndarray, pids: list[int] | None) -> np.ndarray:
    """[E] whether each event's thread belongs to one of `pids` (all true without `pids`)."""
    if pids is None:
        return np.ones(len(tids), dtype=bool)
    return np.isin(trace.pids(tids), np.asarray(pids, dtype=np.int64))


def _kernels(trace: Trace, start, end, pids: list[int] | None = None) -> tuple[list[list], str]:
    ops = trace.ops
    launched = (ops.api_tid >= 0) & _mine(trace, ops.api_tid, pids)
    if launched.any():
        t = ops.api_start[launched]
        return _top(_owner(t, start, end), ops.name[launched], (ops.end - ops.start)[launched], len(start),
                    trace), "gpu"  # fmt: skip
    h = trace.host_events
    sel = np.flatnonzero((h.kind == CPU_OP) & _mine(trace, h.tid, pids))
    empty = np.empty(0, dtype=np.int64)
    child, _, _ = nest(h.start[sel], h.end[sel], h.tid[sel], empty, empty, empty)
    own = (h.end[sel] - h.start[sel]) - child
    return _top(_owner(h.start[sel], start, end), h.name[sel], own, len(start), trace), "cpu_op"


def _regions(trace: Trace, start, end, pids: list[int] | None = None) -> list[list]:
    r = trace.ranges
    names = trace.names.values
    step_id = names.index(DECODE_STEP) if DECODE_STEP in names else -1
    sel = np.flatnonzero((r.name != step_id) & _mine(trace, r.tid, pids))
    empty = np.empty(0, dtype=np.int64)
    child, _, _ = nest(r.start[sel], r.end[sel], r.tid[sel], empty, empty, empty)
    own = (r.end[sel] - r.start[sel]) - child
    return _top(_owner(r.start[sel], start, end), r.name[sel], own, len(start), trace)


def words(detail: dict | None) -> str:
    """'kernels aten::mm 3.1 ms, aten::addmm 0.4 ms; regions roseinfer.lm_head 2.0 ms, ...' ('' without detail)."""
    if not detail:
        return ""
    what = "kernels" if detail["kernel_kind"] == "gpu" else "CPU ops"
    parts = []
    for label, rows in ((what, detail["kernels"]), ("regions", detail["regions"])):
        if rows:
            parts.append(f"{label} " + ", ".join(f"{n} {ns / 1e6:.2f} ms" for n, ns in rows))
    return "; ".join(parts)
