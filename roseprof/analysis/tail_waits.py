"""Where only a run's slowest steps waited: a tail figure (a step's or a token's p95, p99 or mean) that grew because
the machine's waits landed in a few steps, not because the code did more work there (issue 44).

machine_speed.slowdown compares the runs' median steps, so a tail that waited while the median step did not is
the code's by that rule. A same-code pair on the shared 2-core box read `ITL p99 +75.5% slower` and failed the gate:
two of its three runs had their slowest 2% of steps at 48-58 ms of wall time on 21-27 ms of CPU time, their median
step 18-19 ms of both (docs/BENCHMARKS.md, session 24: work beside the capture took the cores for a few seconds).

So each run's slowest steps (those at or beyond its TAIL_PCT-th percentile of wall time) are measured: their mean
wall time, their mean CPU time (the regions' own thread CPU time summed, the step log's version 3: a wait for a
core is not in it, heavier code is) and where their waits were. A side's figure is the geometric mean of its
runs'. decision.tail_waited judges them: the slowest steps' wall time grew, their CPU time grew by less than
CPU_SHARE of that, and the waits were not in one place. Where every run's step log has the steps' waits for a
core (the kernel's run delay, roseinfer/run_delay.py), those say it instead of the place: the slowest steps' wall
time less those waits grew by less than CPU_SHARE of their wall time's growth (on Linux 6.18 a crowded core's waits
landed in one or two regions step after step, a place like a sleep's: docs/BENCHMARKS.md, session 33).

Not in one place: a sleep, a lock or blocking I/O added to one region at a few steps is wall time without CPU time
too, as the machine's waits are, but it waits in that region every time, while the machine's waits land in
whichever region is running. For each slowest step, the region that waited most for its CPU time (own wall time
less own CPU time, over own CPU time; regions of at least MIN_SHARE of the step, whose ratio is not the clock's
grain) is its place; where the steps of one place hold a share of the waits of a side's slowest steps (a step's
wait: its wall time less its CPU time) ONE_PLACE beyond that region's share of their CPU time, the tail is the
code's (the engine's region clocks say which region: `roseprof show`'s per-step breakdown, or the step log's
`cpu_own_ns` beside the trace's own times). A wait outside every region is not seen by this: it counts as the
machine's where the steps' CPU time did not grow.
"""

from __future__ import annotations

import numpy as np

from roseprof.analysis.run_data import RunData

# The slowest steps of a run: those at or beyond this percentile of its steps' wall time (the p95 figures' steps;
# the p99's are among them).
TAIL_PCT = 95.0
# A region under this share of the step's CPU time has no place in the tail's waits: a 50 µs region's wait ratio is
# its clock's grain (and a 3 ms slice of the machine's landing in it would name it every time it landed).
MIN_SHARE = 0.01
# One place: the steps where the same region waited most hold a share of the waits of a side's slowest steps at
# least this much beyond that region's share of their CPU time. The machine's waits land in whichever region runs,
# about in proportion to its time (lm_head, ~45% of the CPU demo's step, about half of them); a region planted to
# sleep at a few steps is the place of all of them however small it is (kv.append_token: 3% of the step).
ONE_PLACE = 0.5


def tail_mask(run: RunData) -> np.ndarray:
    """[S] bool: the run's slowest steps (at or beyond its TAIL_PCT-th percentile of wall time; at least one)."""
    dur = run.step_dur
    return dur >= np.percentile(dur, TAIL_PCT)


def _cpu_per_step(run: RunData, names: list[str]) -> np.ndarray:
    return np.sum([run.step_cpu[n] for n in names], axis=0)  # [S] ns


def places(run: RunData, names: list[str], mask: np.ndarray) -> list[str | None]:
    """For each slowest step (`mask`), the region whose own wall time exceeded its own CPU time the most for that
    CPU time (None where no region has both clocks)."""
    walled = [n for n in names if n in run.step_self]
    if not walled:
        return [None] * int(mask.sum())
    cpu = np.array([run.step_cpu[n][mask] for n in walled])  # [N regions, T slowest steps] ns
    wall = np.array([run.step_self[n][0][mask] for n in walled])  # [N, T] ns
    big = cpu >= MIN_SHARE * cpu.sum(axis=0)  # [N, T]
    ratio = np.where(big, (wall - cpu) / np.maximum(cpu, 1.0), -np.inf)  # [N, T]
    return [walled[i] if np.isfinite(ratio[i, t]) else None for t, i in enumerate(ratio.argmax(axis=0))]


def _side(runs: list[RunData], names: list[str]) -> dict:
    """A side's slowest steps: per run their mean wall and CPU time (ms); and the region that was the place of
    most of their waits, with its share of them (each step's wait, its wall time less its CPU time, counted at its
    place: a slowest step that hardly waited weighs next to nothing)."""
    wall, cpu, unwaited, waits, work = [], [], [], {}, {}
    for run in runs:
        mask = tail_mask(run)
        step_cpu = _cpu_per_step(run, names)[mask]  # [T] ns
        wall.append(float(run.step_dur[mask].mean()) / 1e6)
        cpu.append(float(step_cpu.mean()) / 1e6)
        if run.step_wait is not None:
            unwaited.append(float((run.step_dur[mask] - run.step_wait[mask]).mean()) / 1e6)
        waited = np.maximum(run.step_dur[mask] - step_cpu, 0.0)  # [T] ns
        for place, ns in zip(places(run, names, mask), waited.tolist()):
            waits[place] = waits.get(place, 0.0) + ns
        for n in names:
            work[n] = work.get(n, 0.0) + float(run.step_cpu[n][mask].sum())
    total, work_total = sum(waits.values()), sum(work.values())
    top = max((p for p in waits if p is not None), key=waits.get, default=None)
    return {
        "wall_ms": wall,
        "cpu_ms": cpu,
        # their wall time less their waits for a core (the step log's run delay), where every run has it
        "unwaited_ms": unwaited if len(unwaited) == len(runs) else None,
        "place": top,
        # the place's share of the slowest steps' waits, and of their CPU time (where the machine's waits land)
        "place_share": waits[top] / total if top is not None and total > 0 else None,
        "place_cpu_share": work[top] / work_total if top is not None and work_total > 0 else None,
    }


def measure(before: list[RunData], after: list[RunData]) -> dict | None:
    """The slowest steps of each side (`before`, `after`: _side's; machine_speed.slowdown adds how after's grew
    against before's, `wall_pct` and `cpu_pct`, by its own growth figure); None where a run has no decode steps or
    no CPU times (a GPU run's host CPU time does not see its kernels: never there)."""
    runs = before + after
    if not runs or not all(r.step_dur is not None and len(r.step_dur) for r in runs):
        return None
    if any(r.kernel_durations for r in runs):
        return None
    names = sorted(set.intersection(*(set(r.step_cpu) for r in runs)))
    if not names:
        return None
    b, a = _side(before, names), _side(after, names)
    return {"pct": TAIL_PCT, "before": b, "after": a}


def one_place(side: dict) -> bool:
    """Whether one region was where a side's slowest steps waited, ONE_PLACE beyond its share of their CPU time: a
    wait of the code's in that region (a sleep, a lock), not the machine's. A sleep in a region that is most of the
    step already (over 1 - ONE_PLACE of it) cannot be told from the machine's waits this way."""
    share, work = side["place_share"], side["place_cpu_share"]
    return share is not None and work is not None and share - work >= ONE_PLACE
