"""How fast the machine ran each run, from its regions: so that "where the time moved" compares the code, not
the machine's load.

On a shared CPU the same code's regions all take 1.5-2x longer in one capture than in the next (other processes
take the cores): every region's own time per step moves by that factor, and a real change in one region (e.g.
+30% in `roseinfer.kv.append_token`) is lost in it. A machine that is busier slows every region alike, a code
change moves a few. So each run's speed factor is the median over the step's regions of (its own time per step /
the before side's typical own time per step): the median-of-ratios normalisation of DESeq (Anders & Huber 2010),
robust while fewer than half the regions change. Own times divided by it are "at the before side's machine
speed". The headline figures (step time, ITL) are never normalised: a uniform slowdown is still a slowdown.

A region's thread CPU time (step log version 3) has no wait for a core in it, but it is not the machine's speed
either: under load the same code's Python-bound regions spend 25-65% more CPU time (caches refilled after other
processes ran, the cores' clocks), so it is normalised the same way (docs/BENCHMARKS.md, session 8).
"""

from __future__ import annotations

import numpy as np

from roseprof.analysis import tail_waits
from roseprof.analysis.run_data import RunData

# Regions under this share of the before side's step time are left out of the median: a 2 µs region's ratio is
# its timer's noise, not the machine's speed.
MIN_SHARE = 0.01
# Fewer regions than this cannot tell one region's change from the machine's speed (with 3, the median is one of
# the two that did not change): no normalisation.
MIN_REGIONS = 3


# The low percentile of the steps' own time (the steps no wait landed in) is the time without the machine's
# interruptions, so regions far below 1% of the step still tell the machine's speed by it: all but those under
# LOW_MIN_SHARE (0.05%: 4 µs of the CPU demo's 7.5 ms step, where the clock's grain starts to show).
LOW_MIN_SHARE = 0.0005


def own_per_step(run: RunData, name: str) -> float:
    """A region's whole-run own time over the steps (what it spent outside them too): a speed estimate only, never
    shown as time per step (sections/regions.py counts the steps alone); MIN_SHARE was set on this figure."""
    per_step, outside = run.step_self[name]
    return (float(per_step.sum()) + outside) / max(len(per_step), 1)


def speed_factors(
    before: list[RunData],
    after: list[RunData],
    statistic=own_per_step,
    min_share: float = MIN_SHARE,
    regions=lambda run: run.step_self,
) -> tuple[list[float], list[float]] | None:
    """Each run's speed factor (1.0: the before side's typical speed; 2.0: everything took twice as long), or None
    where the runs have too few regions inside their steps to tell. `statistic(run, region)` is the per-run figure
    the regions are compared by (default: the mean own time per step), over the regions `regions(run)` holds
    (default: those with a wall own time per step; `run.step_cpu`: those with a CPU one)."""
    runs = before + after
    if not all(regions(r) and r.step_dur is not None and len(r.step_dur) for r in runs):
        return None
    names = sorted(set.intersection(*(set(regions(r)) for r in runs)))
    step_time = float(np.mean([r.step_dur.mean() for r in before]))
    own = {n: np.array([statistic(r, n) for r in runs]) for n in names}  # name -> [R] ns per step
    ref = {}
    for n, values in own.items():
        b = values[: len(before)]
        if np.all(values > 0) and np.exp(np.log(b).mean()) >= min_share * step_time:
            ref[n] = np.exp(np.log(b).mean())  # the before side's geometric mean
    if len(ref) < MIN_REGIONS:
        return None
    ratios = np.array([own[n] / ref[n] for n in ref])  # [N regions, R runs]
    factors = np.median(ratios, axis=0).tolist()
    return factors[: len(before)], factors[len(before) :]


def _growth_pct(values: list[float], n_before: int) -> float | None:
    """The after side's geometric mean over the before side's, as a percent change (None where a value is 0)."""
    v = np.asarray(values, dtype=np.float64)
    if not np.all(v > 0):
        return None
    return float(100.0 * (np.exp(np.log(v[n_before:]).mean() - np.log(v[:n_before]).mean()) - 1.0))


def slowdown(before: list[RunData], after: list[RunData]) -> dict | None:
    """How much slower the after side ran, by three measures (percent; None where the runs cannot tell), for the
    decision to tell a busier machine from slower code (decision.machine_slower):

        wall_pct   the step's wall time (each run's median step)
        cpu_pct    the regions' own thread CPU time per step, summed (each run's median step; CPU runs with the
                   step log's CPU times only: a wait for a core is in the wall time, not in this, while heavier
                   code is in both; on a GPU the host's CPU time does not see the kernels, so never there)
        speed_pct  the machine speed factor above (every region's time grown alike)
        unwaited_pct  the step's wall time less its waits for a core (each run's median step; runs whose step log
                   has the steps' run delay only, roseinfer/run_delay.py): what the machine's waits are not in,
                   while a sleep or a lock is
        tail       the runs' slowest steps, their wall and CPU time (tail_waits.measure: where only they waited)

    None where a run has no decode steps."""
    runs = before + after
    if not runs or not all(r.step_dur is not None and len(r.step_dur) for r in runs):
        return None
    n = len(before)
    cpu = None
    names = set.intersection(*(set(r.step_cpu) for r in runs))
    if names and not any(r.kernel_durations for r in runs):
        cpu = _growth_pct([float(np.median(sum(r.step_cpu[k] for k in names))) for r in runs], n)
    unwaited = None
    if all(r.step_wait is not None for r in runs):
        unwaited = _growth_pct([float(np.median(r.step_dur - r.step_wait)) for r in runs], n)
    factors = speed_factors(before, after)
    tail = tail_waits.measure(before, after)
    if tail is not None:  # the slowest steps' growth, one value a run as the median step's
        for key in ("wall", "cpu", "unwaited"):
            values = (tail["before"].get(f"{key}_ms"), tail["after"].get(f"{key}_ms"))
            tail[f"{key}_pct"] = None if None in values else _growth_pct(values[0] + values[1], n)
    return {
        "wall_pct": _growth_pct([float(np.median(r.step_dur)) for r in runs], n),
        "cpu_pct": cpu,
        "speed_pct": None if factors is None else _growth_pct(factors[0] + factors[1], n),
        "unwaited_pct": unwaited,
        "tail": tail,
    }
