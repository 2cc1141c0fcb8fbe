"""The noise floor: how large a change must be, beyond its interval, to be called one.

A bootstrap interval that excludes zero says the two samples differ; it does not say the difference matters, nor
that it will be there in the next capture of the same code. Between two captures of the same code a region's time
per step moves by several percent on a quiet GPU and by tens of percent on a shared CPU (the machine's load, not
the code), and over one run's thousands of steps the within-run interval of that move is narrow. So a metric is
called a change (`significant`; a verdict word, a row of "where the time moved", a gate regression) only when its
whole interval lies beyond the floor of its family:

    slower  ci_low  > +floor%
    faster  ci_high < -floor / (100 + floor) %     (the same ratio: diff B A calls the change diff A B found)

and never when the interval has zero width (every resample gave the same value: the resampling saw no variation,
which is not certainty). The floors are per metric family, per device and per kind of diff, calibrated from
same-code pairs (scripts/noise_floor_calibration.py; docs/BENCHMARKS.md, session 6): groups of runs have the
floors of same-code pairs of groups; one run a side, whose interval cannot see the drift between runs, has the
floors of same-code pairs of single runs (their p95 move, so that a change must be larger than 19 in 20 of the
moves between two runs of the same code). `--min-effect PCT` replaces them all.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass

# Metric name -> family, first match wins (fnmatch globs over diff.compare's and ncu_diff.compare's names).
FAMILIES = (
    ("steps.rollover.regions_cpu_p50.*", "region CPU time in rollover steps"),
    ("steps.rollover.regions*", "region time in rollover steps"),
    ("steps.normal.regions*", "region time in normal steps"),
    ("steps.*", "step time"),
    ("itl.*", "ITL"),
    ("requests.ttft.*", "TTFT"),
    ("serving.ttft.*", "serving TTFT"),
    ("serving.itl.*", "serving ITL"),
    ("serving.tpot.*", "serving TPOT and E2E"),
    ("serving.e2e.*", "serving TPOT and E2E"),
    # a sweep's rates (sections/loads.py: sweep.RATE/s.ttft.p50_ms): each rate as one load
    ("sweep.*.ttft.*", "serving TTFT"),
    ("sweep.*.itl.*", "serving ITL"),
    ("sweep.*.tpot.*", "serving TPOT and E2E"),
    ("sweep.*.e2e.*", "serving TPOT and E2E"),
    ("requests.*", "request figures"),
    ("regions.*.cpu_own_ns", "region CPU own time per step"),
    ("regions.*.cpu_own_p5_ns", "region CPU own time per step"),
    ("regions.*.cpu_own_p5_raw_ns", "region CPU own time per step"),
    ("regions.*.self_ns", "region own time per step"),
    ("regions.*.self_p5_ns", "region own time per step"),
    ("regions.*", "region time per step"),
    ("kernels.*", "kernel time per step"),
    ("gpu.*", "GPU kernel time per step"),
    ("ncu.*", "ncu kernel metrics"),
)
OTHER = "other"

# Percent, per device and family. CPU: scripts/diff_acceptance.sh's same-code groups of the CPU demo, 3 runs a side
# on the shared 2-core machine with two competing processes (2026-11-24, load 7-8), each floor above the largest
# move beyond zero that any same-code pair of groups showed in its family (scripts/noise_floor_calibration.py;
# docs/BENCHMARKS.md, session 6): region own time 8.1% seen (attention), TTFT 84% (one group's TTFT p50 was 3.7x
# another's: on a busy CPU the first token waits for the cores), none elsewhere. Families where nothing moved keep
# a floor of what a change must be to matter: 10% for the user-facing step time and ITL, as the usual gate.
# Regions of the rollover steps (a few a run) and whole-region totals (not speed-normalised) get more room.
# Region CPU own time (step log version 3; docs/BENCHMARKS.md, session 8): five batches of the same script
# (2026-11-24, 07:11-07:25 UTC, two competing processes, one batch four): the same-code group pairs' largest move
# beyond zero was 13.7% (lm_head's p5 at the before side's speed, acc5; 0-0.5% in the other four), so 15%.
# A region's own CPU time in the rollover steps at its run's pace (sections/steps.AT_ROLLOVER_CPU; docs/BENCHMARKS.md,
# session 21): the nine same-code pairs of groups kept from sessions 19-20's scripts/ab_pairs.sh (the CPU demo, 3 runs
# a side, load 1-9, two of them beside two CPU burners): no region's interval reached beyond 0 in any, so the 10% a
# change must be to matter; their 27 matched run pairs, one run a side: at most 9.1% (argmax), but a fresh pair's
# reached 25.1% (kv.append_token: one run's rollover steps took 1.4-4x its normal steps' CPU time), so 30%.
# A load's latencies (roseprof load, bootstrapped over requests), calibrated by scripts/load_floor_calibration.sh:
# five same-code loads of `roseinfer serve gpt2-tiny --device cpu` on the shared 2-core machine (the server and the
# client on the same two cores, load average 3-4; 2026-11-28), their ten pairs one run a side: the interval reached
# beyond 0 by at most TTFT 43.5% (p50) / 52.9% (p90), ITL 37.5% / 73.5%, TPOT 36.4% / 47.7%, E2E 38.4% / 47.1%
# (docs/BENCHMARKS.md), so each floor above its family's largest. Groups of runs are not calibrated apart: they keep
# these (a group diff may call fewer changes than it could, never more), and so does a GPU diff until
# scripts/gpu/load.sh's same-code pairs are measured.
SERVING_FLOORS = {"serving TTFT": 55.0, "serving ITL": 75.0, "serving TPOT and E2E": 50.0}
CPU_FLOORS = {
    "step time": 10.0,
    "ITL": 10.0,
    "TTFT": 100.0,
    "request figures": 10.0,
    "region own time per step": 10.0,
    "region CPU own time per step": 15.0,
    "region time per step": 15.0,
    "region time in normal steps": 15.0,
    "region time in rollover steps": 30.0,
    "region CPU time in rollover steps": 10.0,
    "kernel time per step": 15.0,
    "ncu kernel metrics": 5.0,
    # A load's client-side latencies (roseprof load), bootstrapped over requests: SERVING_FLOORS below.
    **SERVING_FLOORS,
    OTHER: 10.0,
}
# GPU: the CPU values, checked on the H100 (`bash scripts/gpu_check.sh gate`, 2026-11-24: the fast-path demo, two
# same-code groups of 3 runs: no family moved beyond 0 at all, so no GPU floor needs to be higher; one pair of
# groups is too few to lower them, so they stay: a GPU diff may call fewer changes than it could, never more).
# The time a step's kernels kept the GPU busy (sections/kernels.GPU_KERNEL_P50; on the one-stream runs below, every
# kernel's own time in the step summed), a GPU family only (a CPU run has no
# kernels, so the CPU floors do not list it): what a change must be to matter, as the step time; the same-code groups
# above moved no kernel beyond 0. One run a side: 10%, the group floor: 30 pairs of single same-code captures of
# batch 1 on an H200 (two calls of `SAME=1 bash scripts/gpu_check.sh ab`, 2026-11-29) reached 0.0% beyond 0 (its
# intervals within ±0.2%), while the planted --no-cuda-attn (+25.1%) cleared it.
GPU_FLOORS = dict(CPU_FLOORS) | {"GPU kernel time per step": 10.0}
GPU_SOURCE = "the CPU floors, checked on an H100 (same-code groups moved no family beyond 0)"

# One run a side: the p95, over every pair of single same-code runs, of how far the within-run interval reached
# beyond 0 (scripts/noise_floor_calibration.py's "one run a side" column), rounded up to the next 5%, and never
# below the group floor. CPU: the nine same-code CPU demo captures of docs/BENCHMARKS.md's second batch (36 pairs,
# the shared 2-core machine with two competing processes, 2026-11-24): step time 106.9%, ITL 110.7%, region own
# time 26.3%, region time 93.1% (97.7% measured again with this code's extra p5 metrics, which change the
# resampling's random draws: 100%), in normal steps 77.8%, in rollover steps 31.6%; TTFT 0 (its floor stays 100%);
# no kernels on a CPU. GPU: the six same-code fast-path demo captures on the H100 (15 pairs, nsys 2025.3.1, the
# same day): step time 25.7%, ITL 24.1%, TTFT 634.5%, region own time 439.1% (the host's `roseinfer.sample`
# waits for the GPU: 193 -> 26 µs per step between two runs), region time 55.9%, in normal steps 412.8%, in
# rollover steps 361.9%, kernels 0 (their floor stays 15%). Region CPU own time (session 8): the nine same-code
# captures of batch acc2 (36 pairs, two competing processes): p95 10.0%, largest 14.8%, so 15%. ncu runs are always one a side: their floor is the
# group one (a kernel replayed under ncu is the steadiest sample there is).
CPU_ONE_RUN_FLOORS = CPU_FLOORS | {
    "step time": 110.0,
    "ITL": 115.0,
    "region own time per step": 30.0,
    "region CPU own time per step": 15.0,
    "region time per step": 100.0,
    "region time in normal steps": 80.0,
    "region time in rollover steps": 35.0,
    "region CPU time in rollover steps": 30.0,
}
GPU_ONE_RUN_FLOORS = GPU_FLOORS | {
    "step time": 30.0,
    "ITL": 25.0,
    "TTFT": 635.0,
    "region own time per step": 440.0,
    "region time per step": 60.0,
    "region time in normal steps": 415.0,
    "region time in rollover steps": 365.0,
}
# (device, one run a side) -> floors
FLOORS = {
    ("cpu", False): CPU_FLOORS,
    ("gpu", False): GPU_FLOORS,
    ("cpu", True): CPU_ONE_RUN_FLOORS,
    ("gpu", True): GPU_ONE_RUN_FLOORS,
}

# An interval narrower than this (percentage points) has zero width: every resample gave the same change.
ZERO_WIDTH = 1e-9


def family(name: str) -> str:
    for pattern, fam in FAMILIES:
        if fnmatch.fnmatchcase(name, pattern):
            return fam
    return OTHER


@dataclass(frozen=True)
class NoiseFloor:
    """The floors one diff applies: the device's calibrated ones for groups or for one run a side, or one value for
    every family (--min-effect)."""

    device: str  # "cpu" or "gpu": which calibration applies
    min_effect_pct: float | None = None  # --min-effect: replaces every family's floor
    one_run: bool = False  # one run a side: the floors of single-run same-code pairs

    @property
    def floors(self) -> dict[str, float]:
        return FLOORS[(self.device, self.one_run)]

    def pct(self, name: str) -> float:
        if self.min_effect_pct is not None:
            return self.min_effect_pct
        return self.floors.get(family(name), self.floors[OTHER])

    def describe(self) -> str:
        if self.min_effect_pct is not None:
            return f"{self.min_effect_pct:g}% for every metric (--min-effect)"
        source = "CPU-calibrated" if self.device == "cpu" else GPU_SOURCE
        if self.one_run:
            source += ", one run a side (the p95 move between two runs of the same code)"
        parts = ", ".join(f"{fam} {pct:g}%" for fam, pct in self.floors.items() if fam != OTHER)
        return f"{self.device.upper()} runs, {source}: {parts}"


def device_of(has_gpu_work: bool) -> str:
    """A diff whose runs launched GPU kernels is a GPU diff: on a GPU the noise is the GPU's (clocks, the host's
    launch jitter), far below a shared CPU's, so one floor for both would hide GPU changes or call CPU noise one."""
    return "gpu" if has_gpu_work else "cpu"


def clears(ci_low: float | None, ci_high: float | None, floor_pct: float) -> bool:
    """Whether an interval of the relative change (percent) lies wholly beyond the floor, either way."""
    if ci_low is None or ci_high is None or ci_high - ci_low <= ZERO_WIDTH:
        return False
    faster_edge = -100.0 * floor_pct / (100.0 + floor_pct)
    return ci_low > floor_pct or ci_high < faster_edge


def apply(metrics: list[dict], floor: NoiseFloor) -> list[dict]:
    """Mark every metric against the floor (in place; returned for chaining): `floor_pct`, `excludes_zero` (the
    interval alone), `zero_width`, and `significant` (clears the floor: what the words, rows and gate use)."""
    for m in metrics:
        lo, hi = m.get("ci_low_pct"), m.get("ci_high_pct")
        m["floor_pct"] = floor.pct(m["name"])
        m["excludes_zero"] = bool(lo is not None and hi is not None and (lo > 0 or hi < 0))
        m["zero_width"] = bool(lo is not None and hi is not None and hi - lo <= ZERO_WIDTH)
        m["significant"] = clears(lo, hi, m["floor_pct"])
        # what the interval alone says: `significant` becomes the diff's decision (decision.mark)
        m["clears_floor"] = m["significant"]
    return metrics


# What one run a side calls between two runs of the same code, per device, with the one-run floors
# (scripts/noise_floor_calibration.py; docs/BENCHMARKS.md, session 7). CPU: the 36 pairs of single CPU demo
# captures of session 6's second batch (nine runs of the same code, the shared 2-core machine with two competing
# processes, load 3-7): the default gate (`--fail-on-regression 10`) fired in 0 (9 with no floor, 12 with the group
# floors), and 14 had a faster/slower word somewhere (session 6 counted 35 with the group floors). GPU: the 15 pairs of single
# fast-path demo captures on the H100 (six runs): the gate fired in 0 (4 with no floor), 4 had a word.
ONE_RUN_FALSE_ALARMS = {
    "cpu": {"fired": 0, "worded": 14, "pairs": 36, "where": "the CPU demo on a busy 2-core machine"},
    "gpu": {"fired": 0, "worded": 4, "pairs": 15, "where": "the fast-path demo on an H100"},
}
