"""torch.profiler's operator table, as users know it from `prof.key_averages()`: per CPU operator (aten::*; by input
shapes too where the profiler recorded them, as `key_averages(group_by_input_shape=True)`), its calls, self and
total CPU time, and self and total device time (the GPU ops launched inside it: by the innermost operator around
the launching call for self, by every operator around it for total).

Self CPU time is an operator's time less that of the operators nested in it on its thread, as key_averages counts
it; an operator nested in one of its own name counts in both totals, as there."""

from __future__ import annotations

import numpy as np

from roseprof.analysis.sections.base import Context, Section, SectionResult
from roseprof.analysis.stats import unique_rows
from roseprof.model import HOST_CATEGORIES, Trace
from roseprof.run.checks import OPT_NUM

CPU_OP = HOST_CATEGORIES.index("cpu_op")
TOP = 40  # rows kept in summary.json (the operators with the most self time)
SHOWN = 20  # of those, rows `show` prints (by name; by input shapes: half as many)


def applies(trace: Trace) -> bool:
    return bool((trace.host_events.kind == CPU_OP).any())


def compute(ctx: Context) -> SectionResult:
    trace = ctx.trace
    h = trace.host_events
    sel = np.flatnonzero(h.kind == CPU_OP)
    ops = trace.ops
    launched = np.flatnonzero(ops.api_tid >= 0)
    start, end = h.start[sel], h.end[sel]
    child_ns, self_dev, dev = _nest(start, end, h.tid[sel], ops.api_start[launched], ops.api_tid[launched],
                                    (ops.end - ops.start)[launched])  # fmt: skip
    # Every column is an [operators] array (a 2.4 GB trace has about 4.3M operators, 34 MB a column): no more of
    # them alive than the table's five and its keys (docs/BENCHMARKS.md, session 27).
    dur = end - start
    del start, end
    cols = {"calls": None, "self_cpu_ns": dur - child_ns, "cpu_ns": dur, "self_device_ns": self_dev,
            "device_ns": dev}  # fmt: skip
    del child_ns, self_dev, dev, dur
    device = len(launched) > 0
    name = h.name[sel]
    by_name, groups = _table(trace, [name], cols, device)
    part = {"groups": groups, "sorted_by": "self_device_ns" if device else "self_cpu_ns", "top": by_name}
    # key_averages(group_by_input_shape=True), where the profiler recorded shapes (record_shapes=True).
    shape = h.shapes()[sel]
    part["by_shape"] = _table(trace, [name, shape], cols, device)[0] if (shape >= 0).any() else None
    return SectionResult({"operators": part})


def _table(trace: Trace, keys: list[np.ndarray], cols: dict, device: bool) -> tuple[list[dict], int]:
    """The TOP rows of one grouping (by name, and by input shapes where `keys` has them as a second column: -1
    where none was recorded), most self time first; and how many groups there are."""
    rows, group = unique_rows(keys, len(trace.names.values))  # [K, 1 or 2] (name, shapes) ids, sorted; [N]
    n_groups = len(rows)
    sums = {
        c: (
            np.bincount(group, minlength=n_groups)
            if v is None
            else np.bincount(group, weights=v, minlength=n_groups)
        ).astype(np.int64)
        for c, v in cols.items()
    }  # "calls": None, each operator once
    first = sums["self_device_ns"] if device else sums["self_cpu_ns"]
    order = np.lexsort((-sums["self_cpu_ns"], -first))
    out = []
    for g in order[:TOP].tolist():
        n, s = int(rows[g, 0]), int(rows[g, 1]) if rows.shape[1] > 1 else -1
        row = {"name": trace.names[n], "shapes": trace.names[s] if s >= 0 else None}
        row.update({c: int(v[g]) for c, v in sums.items()})
        if not device:
            row["self_device_ns"] = row["device_ns"] = None
        out.append(row)
    return out, n_groups


def _nest(start, end, tid, launch_t, launch_tid, launch_ns):
    """Per operator: the CPU time of the operators directly inside it, and the device time of the GPU ops launched
    directly inside it (self) and anywhere inside it (total), from one sweep per thread. The sweep walks Python
    lists, not the arrays: a numpy scalar read per step cost a second per 300k operators. Each thread's lists are
    made for its sweep alone, so they hold one thread's operators at a time: the whole trace's as lists (40 bytes
    an int) added 77 MB to the peak of a 318 MB import of 8 ranks (docs/BENCHMARKS.md, session 27)."""
    n = len(start)
    child_ns, self_dev, dev = (np.zeros(n, dtype=np.int64) for _ in range(3))
    launches = {}
    for t in np.unique(launch_tid).tolist():
        li = np.flatnonzero(launch_tid == t)
        launches[t] = li[np.argsort(launch_t[li], kind="stable")]
    for t in np.unique(tid).tolist():
        oi = np.flatnonzero(tid == t)
        oi = oi[np.lexsort((-end[oi], start[oi]))]  # outer before inner at the same start
        li = launches.get(t, oi[:0])
        child, mine, inside = _sweep(start[oi].tolist(), end[oi].tolist(), launch_t[li].tolist(),
                                     launch_ns[li].tolist())  # fmt: skip
        child_ns[oi], self_dev[oi], dev[oi] = child, mine, inside
    return child_ns, self_dev, dev


def _sweep(starts: list, ends: list, launch_at: list, launch_dur: list) -> tuple[list, list, list]:
    """One thread's nesting sweep: its operators sorted by start (outer first at a tie), its launches by time;
    (child CPU ns, self device ns, device ns) per operator, in that order."""
    n = len(starts)
    child_ns, self_dev, dev = [0] * n, [0] * n, [0] * n
    stack: list[int] = []
    j, n_launches = 0, len(launch_at)
    for i in range(n + 1):
        at = starts[i] if i < n else None
        # Launches before this operator starts land in the operators open then.
        while j < n_launches and (at is None or launch_at[j] < at):
            lt = launch_at[j]
            while stack and ends[stack[-1]] <= lt:
                stack.pop()
            if stack:
                ns = launch_dur[j]
                self_dev[stack[-1]] += ns
                for s in stack:
                    dev[s] += ns
            j += 1
        if i == n:
            break
        while stack and ends[stack[-1]] <= at:
            stack.pop()
        if stack:
            child_ns[stack[-1]] += ends[i] - starts[i]
        stack.append(i)
    return child_ns, self_dev, dev


def panels(summary: dict) -> list[dict]:
    part = summary.get("operators")
    if not part or not part.get("top"):
        return []
    device = part["sorted_by"] == "self_device_ns"
    ms = lambda ns: f"{ns / 1e6:,.3f}"  # noqa: E731
    by = "self device" if device else "self CPU"
    columns = ["operator", "calls", "self CPU ms", "CPU ms"] + (["self dev ms", "dev ms"] if device else [])
    rows = [
        [r["name"], f"{r['calls']:,}", ms(r["self_cpu_ns"]), ms(r["cpu_ns"])]
        + ([ms(r["self_device_ns"]), ms(r["device_ns"])] if device else [])
        for r in part["top"][:SHOWN]
    ]
    out = [{
        "title": "operators (torch.profiler)", "columns": columns, "rows": rows,
        "note": f"{len(rows)} of {part['groups']:,} operators, by {by} time, as torch.profiler's key_averages(); "
        "all rows: roseprof show RUN --json",
    }]  # fmt: skip
    if part.get("by_shape"):
        key = "self_device_ns" if device else "self_cpu_ns"
        out.append({
            "title": "operators by input shapes (key_averages(group_by_input_shape=True))",
            "columns": ["operator", "calls", f"{by} ms", "input shapes"],
            "rows": [
                [r["name"], f"{r['calls']:,}", ms(r[key]), (r["shapes"] or "").replace(", ", ",")]
                for r in part["by_shape"][: SHOWN // 2]
            ],
            "note": "all rows and times: roseprof show --json",
            "shrink": [0, 3],
        })  # fmt: skip
    return out


OP_ROW = {
    "name": str, "shapes": (str, None), "calls": int, "self_cpu_ns": int, "cpu_ns": int,
    "self_device_ns": OPT_NUM, "device_ns": OPT_NUM,
}  # fmt: skip
CHECKS = {
    "operators": ({"groups": int, "sorted_by": str, "top": [OP_ROW], "by_shape": ([OP_ROW], None)}, None)
}

SECTION = Section(
    "operators", compute, applies=applies, absent={"operators": None}, checks=CHECKS, panels=panels
)
