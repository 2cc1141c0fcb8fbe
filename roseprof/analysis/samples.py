"""One stored run as the samples a comparison needs: step times, ITL (with the step behind each token), TTFT,
per-step region and kernel time, instance durations. Built from the run's tables and trace; no I/O here."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from roseprof.analysis.ranges import build_tree
from roseprof.analysis.stats import groups
from roseprof.analysis.steps import CPU_PREFIX, cpu_regions
from roseprof.analysis.stream_time import own_stream_ns
from roseprof.model import KERNEL, Trace, spelled_range_names, spelled_region


@dataclass
class RunData:
    """One run's samples, as the comparison needs them."""

    summary: dict
    step_dur: np.ndarray | None  # [S]
    step_roll: np.ndarray | None  # [S] bool
    itl: np.ndarray | None  # [T] ms
    itl_roll: np.ndarray | None  # [T] bool
    itl_step: np.ndarray | None  # [T] decode step of each token: tokens of one step move together
    step_regions: dict[str, np.ndarray]  # region inside the decode step -> [S] ns per step
    # kernel -> ([S] its own stream ns launched in each step, own ns outside)
    kernel_steps: dict[str, tuple[np.ndarray, float]]
    region_durations: dict[str, np.ndarray]  # name -> instance durations
    region_self: dict[str, float]
    kernel_durations: dict[str, np.ndarray]  # kernel name -> instance durations
    ttft: np.ndarray | None = None  # [R] ms per request (runs stored before itl.json had ttft_ms: None)
    # region inside the decode step -> ([S] its own ns (less its children) in each step, own ns outside the steps)
    step_self: dict[str, tuple[np.ndarray, float]] = field(default_factory=dict)
    # kernel -> [S] its launches in each step: a kernel whose time per step moved because it runs more or fewer
    # times a step (the same kernel given other work) is not faster or slower
    kernel_launches: dict[str, np.ndarray] = field(default_factory=dict)
    # kernel name -> each launch's own time on its stream (its duration where nothing overlaps it): what a run's
    # kernel totals add, so that under programmatic dependent launch no kernel is charged for its wait
    kernel_own: dict[str, np.ndarray] = field(default_factory=dict)
    # region inside the decode step -> [S] its own thread CPU ns in each step (the step log's, version 3: no wait for
    # a core in it); empty for runs captured without them
    step_cpu: dict[str, np.ndarray] = field(default_factory=dict)
    # section name -> what that section's diff_prepare made of the stored run: samples of its own (a per-step
    # column from the trace and the step windows, say) that its diff_samples families read back
    sections: dict[str, object] = field(default_factory=dict)

    @property
    def steps(self) -> int | None:
        return None if self.step_dur is None else len(self.step_dur)


def prepare(summary: dict, steps: dict | None, itl_rows: list | None, trace: Trace) -> RunData:
    """A stored run's summary, step and ITL tables and trace, as samples to compare."""
    step_dur = step_roll = None
    step_regions = {}
    step_cpu: dict[str, np.ndarray] = {}
    if steps and steps.get("rows"):
        step_dur = np.asarray(steps["rows"]["dur_ns"], dtype=np.float64)
        step_roll = np.asarray(steps["rows"]["rollovers"]) > 0
        for name in steps.get("regions", []):
            step_regions[name] = np.asarray(steps["rows"][f"region:{name}"], dtype=np.float64)
        step_cpu = {
            name: np.asarray(steps["rows"][CPU_PREFIX + name], dtype=np.float64)
            for name in cpu_regions(steps["rows"])
        }
    itl_rows = itl_rows or []
    itl = itl_roll = itl_step = None
    if itl_rows:
        itl = np.concatenate([np.asarray(r["itl_ms"], dtype=np.float64) for r in itl_rows])
        itl_roll = np.concatenate([np.asarray(r["rollover"], dtype=bool) for r in itl_rows])
        if all("step" in r for r in itl_rows):
            itl_step = np.concatenate([np.asarray(r["step"], dtype=np.int64) for r in itl_rows])
        # Tokens whose gap holds the profiler's own work or a CUDA-graph capture are no ITL sample.
        keep = np.concatenate(
            [
                np.array([w is None for w in r.get("left_out") or [None] * len(r["itl_ms"])], bool)
                for r in itl_rows
            ]
        )
        itl, itl_roll = itl[keep], itl_roll[keep]
        itl_step = itl_step[keep] if itl_step is not None else None
    ttft = None
    if itl_rows and all("ttft_ms" in r for r in itl_rows):
        ttft = np.asarray([r["ttft_ms"] for r in itl_rows if r["ttft_ms"] is not None], dtype=np.float64)
    names = trace.names
    region_durations: dict[str, np.ndarray] = {}
    kernel_durations: dict[str, np.ndarray] = {}
    kernel_own: dict[str, np.ndarray] = {}
    r = trace.ranges
    # A region is named as every table spells it (`NCCL:ncclAllReduce` outside the default domain), as the step
    # rows' region columns and summary.json's region rows (name and domain) say it.
    spelled = spelled_range_names(trace)
    range_name = r.name if spelled is None else spelled
    if len(r):
        dur, name = r.end - r.start, range_name
        order = np.argsort(name, kind="stable")
        for idx, chunk in zip(*groups(name[order], dur[order])):
            region_durations[names[idx]] = chunk
    kernel_steps: dict[str, tuple[np.ndarray, float]] = {}
    kernel_launches: dict[str, np.ndarray] = {}
    o = trace.ops
    if len(o):
        kernel = o.kind == KERNEL
        dur, name, api = (o.end - o.start)[kernel], o.name[kernel], o.api_start[kernel]
        # A kernel's time is its own time on its stream (`stream_time`): under programmatic dependent launch a
        # kernel's duration includes its wait for the one before, so summed durations would call a kernel slower
        # when it merely starts earlier. Without overlap it is the duration.
        own = own_stream_ns(o)[kernel]
        order = np.argsort(name, kind="stable")
        for idx, chunk in zip(*groups(name[order], dur[order])):
            kernel_durations[names[idx]] = chunk
        for idx, chunk in zip(*groups(name[order], own[order])):
            kernel_own[names[idx]] = chunk
        if step_dur is not None and len(dur):
            # The step each kernel was launched in, by its API call's time within the step windows.
            starts = np.asarray(steps["rows"]["start_ns"], dtype=np.int64)
            ends = starts + step_dur.astype(np.int64)
            owner = np.searchsorted(starts, api, side="right") - 1
            inside = (owner >= 0) & (api >= 0) & (api <= ends[np.maximum(owner, 0)])
            for idx in np.unique(name):
                sel = name == idx
                in_steps = sel & inside
                per_step = np.bincount(owner[in_steps], weights=own[in_steps], minlength=len(starts))
                kernel_steps[names[idx]] = (per_step.astype(np.float64), float(own[sel & ~inside].sum()))
                kernel_launches[names[idx]] = np.bincount(owner[in_steps], minlength=len(starts))
    region_self = {
        spelled_region(r["name"], r.get("domain")): float(r["self_ns"]) for r in summary.get("regions") or []
    }
    step_self = _step_self(trace, range_name, steps, step_dur, set(step_regions))
    # Imported here: the sections' diff hooks import this module (RunData).
    from roseprof.analysis.sections import SECTIONS

    own = {s.name: s.diff_prepare(summary, steps, itl_rows, trace) for s in SECTIONS if s.diff_prepare}
    return RunData(
        summary,
        step_dur,
        step_roll,
        itl,
        itl_roll,
        itl_step,
        step_regions,
        kernel_steps,
        region_durations,
        region_self,
        kernel_durations,
        ttft,
        step_self,
        sections=own,
        step_cpu=step_cpu,
        kernel_launches=kernel_launches,
        kernel_own=kernel_own,
    )


def _step_self(
    trace: Trace, range_name: np.ndarray, steps: dict | None, step_dur, inside_step: set[str]
) -> dict:
    """Own time per decode step of every region that runs inside the steps: each range's duration less its direct
    children's (ranges.build_tree, as summary.json's self_ns), summed per step by when the range starts. The
    region whose own time grew is where the time went; its parents' totals only grew with it."""
    r = trace.ranges
    if not len(r) or step_dur is None or not inside_step:
        return {}
    self_ns = build_tree(r.start, r.end, r.tid).self_ns.astype(np.float64)  # [R]
    starts = np.asarray(steps["rows"]["start_ns"], dtype=np.int64)  # [S]
    ends = starts + step_dur.astype(np.int64)
    owner = np.searchsorted(starts, r.start, side="right") - 1  # [R] the step a range starts in, or -1
    inside = (owner >= 0) & (r.end <= ends[np.maximum(owner, 0)])
    out = {}
    for idx in np.unique(range_name):  # [R] each range's spelled name
        name = trace.names[idx]
        if name not in inside_step:
            continue
        sel = range_name == idx
        per_step = np.bincount(owner[sel & inside], weights=self_ns[sel & inside], minlength=len(starts))
        out[name] = (per_step.astype(np.float64), float(self_ns[sel & ~inside].sum()))
    return out
