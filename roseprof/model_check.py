"""The model's invariants: what every driver's Trace must satisfy (the driver contract test reads every fixture
through its driver and checks them here, tests/roseprof/test_drivers.py)."""

from __future__ import annotations

import numpy as np

from roseprof.model import PUSH_POP, Ranges, Trace


def check(trace: Trace) -> list[str]:
    """The model's invariants; returns what is violated (empty when the trace is sound)."""
    problems = []
    r, o, n = trace.ranges, trace.ops, len(trace.names)
    if len(r):
        key = np.lexsort((-r.end, r.start, r.tid))
        if not np.array_equal(key, np.arange(len(r))):
            problems.append("ranges are not sorted by (thread, start, end descending)")
        if (r.end < r.start).any():
            problems.append("a range ends before it starts")
        if r.name.min() < 0 or r.name.max() >= n:
            problems.append("a range name does not resolve")
        if r.domain.min() < 0 or r.domain.max() >= len(trace.domains):
            problems.append("a range domain does not resolve")
        if not _push_pop_nested(r):
            problems.append("push/pop ranges overlap without nesting on a thread")
    if len(trace.marks) and (trace.marks.name.min() < 0 or trace.marks.name.max() >= n):
        problems.append("a mark name does not resolve")
    if len(o):
        if (np.diff(o.start) < 0).any():
            problems.append("GPU ops are not sorted by start")
        if (o.end < o.start).any():
            problems.append("a GPU op ends before it starts")
        if o.name.min() < 0 or o.name.max() >= n:
            problems.append("a GPU op name does not resolve")
        named = o.api_name[o.api_name >= 0]
        if len(named) and named.max() >= n:
            problems.append("a launching API call name does not resolve")
    km = trace.kernel_metrics
    if km is not None and len(km):
        if km.op.min() < 0 or km.op.max() >= len(o):
            problems.append("a per-launch metric row names no GPU op")
        if any(len(v) != len(km) for v in km.values.values()) or len(km.nvtx) != len(km):
            problems.append("per-launch metric columns differ in length")
    return problems


def _push_pop_nested(r: Ranges) -> bool:
    """Each push/pop range either ends before the next one on its thread starts, or encloses it."""
    pp = np.flatnonzero(r.style == PUSH_POP)
    stack: list[int] = []  # ends of the open ranges on the current thread
    tid = None
    for start, end, t in zip(r.start[pp].tolist(), r.end[pp].tolist(), r.tid[pp].tolist()):
        if t != tid:
            stack, tid = [], t
        while stack and stack[-1] <= start:
            stack.pop()
        if stack and end > stack[-1]:
            return False
        stack.append(end)
    return True
