"""One stored run as the samples a comparison needs: `prepare` asks each section given for its samples
(`Section.diff_prepare`), and the built-in sections' builders are here: step times (steps), ITL with the step behind
each token and TTFT (itl), instance durations and per-step own time (regions), per-step kernel time and launches
(kernels). Built from the run's tables and trace, or taken from the samples an import stored (`prepare_stored`);
no I/O here, and no section is known by name."""

from __future__ import annotations

import numpy as np

from roseprof.analysis.gpu_time import busy_by_group
from roseprof.analysis.ranges import build_tree
from roseprof.analysis.run_data import SHARED_FIELDS, RunData, Shared
from roseprof.analysis.stats import dense_ids, groups, stable_order
from roseprof.analysis.steps import CPU_PREFIX, WAIT, cpu_regions
from roseprof.analysis.stream_time import own_stream_ns
from roseprof.model import KERNEL, Trace, spelled_range_names, spelled_region

# The version of what the builders below (and every section's diff_prepare) make of a run, kept with the samples an
# import stores (run/sample_tables.py): a diff reads stored samples only of this version and builds them from the
# trace otherwise. Raise it whenever a builder's output changes, or diffs of runs imported before would compare
# samples that the code no longer makes.
SAMPLES_VERSION = 3  # 2: the steps' waits for a core (step_wait); 3: the steps' GPU busy time (step_gpu_busy)


def prepare(summary: dict, steps: dict | None, itl_rows: list | None, trace: Trace, sections) -> RunData:
    """A stored run's summary, step and ITL tables and trace, as the samples `sections` (analysis/sections/
    SECTIONS, or any list of sections) make of them: each section's `diff_prepare`, in the order given."""
    return _assemble(summary, made(summary, steps, itl_rows, trace, sections).items())


def made(summary: dict, steps: dict | None, itl_rows: list | None, trace: Trace, sections) -> dict:
    """{section name: what its diff_prepare makes of the run} (sections without one left out), in their order: what
    an import stores (the shapes run/sample_tables.py keeps) and `prepare_stored` reads back."""
    return {
        s.name: s.diff_prepare(summary, steps, itl_rows, trace)
        for s in sections
        if s.diff_prepare is not None
    }


def prepare_stored(summary: dict, stored: dict, read_inputs, sections) -> RunData:
    """As `prepare`, each section's samples taken from `stored` ({section name: samples}, as an import stored them:
    run/sample_tables.py) where it holds them; the others made by the section from the run's step and ITL tables
    and trace, which `read_inputs()` -> (steps, itl_rows, trace) reads only when a section needs them."""
    inputs = None

    def each():
        nonlocal inputs
        for s in sections:
            if s.diff_prepare is None:
                continue
            if s.name in stored and _usable(stored[s.name]):
                kept = stored[s.name]
                yield s.name, Shared(kept) if isinstance(kept, dict) else kept
                continue
            if inputs is None:
                inputs = read_inputs()
            yield s.name, s.diff_prepare(summary, *inputs)

    return _assemble(summary, each())


def _usable(kept) -> bool:
    """Whether stored samples can stand for what the section makes: a Shared of RunData's fields, its own array, or
    None (anything else: a file of other builders, made again from the trace)."""
    return (
        kept is None
        or isinstance(kept, np.ndarray)
        or (isinstance(kept, dict) and set(kept) <= SHARED_FIELDS)
    )


def _assemble(summary: dict, pairs) -> RunData:
    """RunData of (section name, what its diff_prepare made) pairs: a Shared's fields become RunData's, anything
    else but None the section's own samples."""
    shared: dict = {}
    own: dict = {}
    for name, made in pairs:
        if isinstance(made, Shared):
            unknown = set(made) - SHARED_FIELDS
            if unknown:
                raise ValueError(f"section {name}: {sorted(unknown)} are no RunData fields")
            shared.update(made)
        elif made is not None:  # None: no samples of this section's in this run
            own[name] = made
    return RunData(summary, **shared, sections=own)


def _step_rows(steps: dict | None) -> dict | None:
    return steps["rows"] if steps and steps.get("rows") else None


def step_samples(summary: dict, steps: dict | None, itl_rows: list | None, trace: Trace) -> Shared:
    """The steps section's: each decode step's time and whether it rolled over, its time per region inside the
    step, its regions' own thread CPU time (the step log's, version 3) and its waits for a core (version 5)."""
    rows = _step_rows(steps)
    if rows is None:
        return Shared(step_dur=None, step_roll=None, step_regions={}, step_cpu={}, step_wait=None)
    return Shared(
        step_dur=np.asarray(rows["dur_ns"], dtype=np.float64),
        step_roll=np.asarray(rows["rollovers"]) > 0,
        step_regions={
            name: np.asarray(rows[f"region:{name}"], dtype=np.float64) for name in steps.get("regions", [])
        },
        step_cpu={name: np.asarray(rows[CPU_PREFIX + name], dtype=np.float64) for name in cpu_regions(rows)},
        step_wait=np.asarray(rows[WAIT], dtype=np.float64) if WAIT in rows else None,
    )


def itl_samples(summary: dict, steps: dict | None, itl_rows: list | None, trace: Trace) -> Shared:
    """The itl section's: every token's ITL (with whether its step rolled over and which step it was), and each
    request's TTFT."""
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
    return Shared(itl=itl, itl_roll=itl_roll, itl_step=itl_step, ttft=ttft)


def _range_names(trace: Trace) -> np.ndarray:
    """[R] each range's name as every table spells it (`NCCL:ncclAllReduce` outside the default domain), as the
    step rows' region columns and summary.json's region rows (name and domain) say it."""
    spelled = spelled_range_names(trace)
    return trace.ranges.name if spelled is None else spelled


def region_samples(summary: dict, steps: dict | None, itl_rows: list | None, trace: Trace) -> Shared:
    """The regions section's: every region's instance durations and own time, and the own time per decode step of
    the regions inside the steps."""
    names = trace.names
    region_durations: dict[str, np.ndarray] = {}
    r = trace.ranges
    range_name = _range_names(trace)
    if len(r):
        dur, name = r.end - r.start, range_name
        order = stable_order(name)
        for idx, chunk in zip(*groups(name[order], dur[order])):
            region_durations[names[idx]] = chunk
    region_self = {
        spelled_region(r["name"], r.get("domain")): float(r["self_ns"]) for r in summary.get("regions") or []
    }
    rows = _step_rows(steps)
    step_dur = None if rows is None else np.asarray(rows["dur_ns"], dtype=np.float64)
    inside_step = set(steps.get("regions", [])) if rows is not None else set()
    return Shared(
        region_durations=region_durations,
        region_self=region_self,
        step_self=_step_self(trace, range_name, steps, step_dur, inside_step),
    )


def kernel_samples(summary: dict, steps: dict | None, itl_rows: list | None, trace: Trace) -> Shared:
    """The kernels section's: every kernel's durations and own time on its stream, per decode step its own time and
    launches, and each step's GPU busy time (the union of the kernels launched in it, per GPU, summed)."""
    names = trace.names
    kernel_durations: dict[str, np.ndarray] = {}
    kernel_own: dict[str, np.ndarray] = {}
    kernel_steps: dict[str, tuple[np.ndarray, float]] = {}
    kernel_launches: dict[str, np.ndarray] = {}
    step_gpu_busy = None
    rows = _step_rows(steps)
    o = trace.ops
    if len(o):
        kernel = o.kind == KERNEL
        dur, name, api = (o.end - o.start)[kernel], o.name[kernel], o.api_start[kernel]
        # A kernel's time is its own time on its stream (`stream_time`): under programmatic dependent launch a
        # kernel's duration includes its wait for the one before, so summed durations would call a kernel slower
        # when it merely starts earlier. Without overlap it is the duration.
        own = own_stream_ns(o)[kernel]
        order = stable_order(name)
        for idx, chunk in zip(*groups(name[order], dur[order])):
            kernel_durations[names[idx]] = chunk
        for idx, chunk in zip(*groups(name[order], own[order])):
            kernel_own[names[idx]] = chunk
        if rows is not None and len(dur):
            # The step each kernel was launched in, by its API call's time within the step windows.
            starts = np.asarray(rows["start_ns"], dtype=np.int64)
            ends = starts + np.asarray(rows["dur_ns"], dtype=np.float64).astype(np.int64)
            owner = np.searchsorted(starts, api, side="right") - 1
            inside = (owner >= 0) & (api >= 0) & (api <= ends[np.maximum(owner, 0)])
            # One [K, S] count over (kernel, step) for all K kernels (the result's size): a pass per kernel over
            # every launch was 0.4 s a run of the 1M-kernel capture.
            ids, kernel_of = dense_ids(name, len(names))  # [K] name ids, [N] each launch's kernel among them
            n_steps = len(starts)
            cell = kernel_of[inside] * n_steps + owner[inside]
            per_step = np.bincount(cell, weights=own[inside], minlength=len(ids) * n_steps)
            # The GPU's busy time a step, which own times on each stream overstate where two streams ran at once
            # (a graph's parallel branches: each kernel keeps its own stream's time)
            if inside.any():
                on = np.flatnonzero(kernel)[inside]
                busy = busy_by_group(owner[inside], o.device[on], o.start[on], o.end[on], n_steps)
                step_gpu_busy = busy.astype(np.float64)
            launches = np.bincount(cell, minlength=len(ids) * n_steps)
            # outside the steps: each kernel's launches are a slice of the launches sorted by name
            out_sorted = own[order][~inside[order]]
            out_bounds = np.cumsum(np.bincount(kernel_of[~inside], minlength=len(ids)))
            for j, idx in enumerate(ids.tolist()):
                outside = out_sorted[out_bounds[j - 1] if j else 0 : out_bounds[j]]
                row = slice(j * n_steps, (j + 1) * n_steps)
                kernel_steps[names[idx]] = (per_step[row].astype(np.float64), float(outside.sum()))
                kernel_launches[names[idx]] = launches[row]
    return Shared(
        kernel_durations=kernel_durations,
        kernel_own=kernel_own,
        kernel_steps=kernel_steps,
        kernel_launches=kernel_launches,
        step_gpu_busy=step_gpu_busy,
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
