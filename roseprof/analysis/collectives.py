"""Collectives per rank: every collective instance of a run, placed in its decode step and matched across ranks.

What a collective instance is, by where the run has it:
    GPU   a NCCL (or RCCL) kernel: `ncclKernel*`, `ncclDevKernel*`, `rccl*`, or any kernel that ran for the
          `roseinfer.layer.allreduce` region (torch's symmetric-memory all-reduce: each of the region's kernels
          counts as one, the same on every rank). Its rank is the process of the call
          that launched it (a graph-replayed kernel: the graph launch's thread); its region is the one it ran for
          (the capture-time region of a replayed kernel, the innermost launching region otherwise). Its arrival is
          the kernel's start on the GPU; its exposed time is the part of it that no other kernel on its GPU
          overlaps (compute hid the rest).
    CPU   a `roseinfer.layer.allreduce` range (gloo: the host itself waits): its arrival is the range's start, and
          all of it is exposed (the rank can do nothing else while it waits).
A run with such kernels is read the GPU way, one without them the CPU way.

The participants are the `ranks` section's ranks (or processes of unknown rank), each with its decode steps
joined to its own step log: the same step index on every rank (a run of one process: the steps table's steps). A
collective belongs to the step whose range holds its host time (the range's start; the launching call of a kernel,
which runs later on the GPU; a kernel whose launching call the file lacks is in no step). Inside a step the
instances are numbered in arrival order, and instance (step, n) of every rank is one collective: the ranks run the
same program, so they issue the same collectives in the same order. A step where the ranks' counts differ is not
matched (and counted): pairing the wrong calls would invent lateness.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from roseprof.model import KERNEL, Trace
from roseprof.workload.roseinfer import ALLREDUCE

COLLECTIVE_KERNEL_PREFIXES = ("ncclkernel", "nccldevkernel", "rccl")  # compared in lower case
# NVTX domains of communication libraries (NCCL names its ranges in a domain of its own, RCCL likewise): their
# ranges are the library's calls, never the program's region a collective was issued from.
LIBRARY_DOMAINS = ("NCCL", "RCCL")


def is_collective_kernel(name: str) -> bool:
    return name.lower().startswith(COLLECTIVE_KERNEL_PREFIXES)


@dataclass
class Instances:
    """Every collective instance [C], ordered by (participant, arrival)."""

    kind: str  # "gpu" (NCCL/RCCL kernels) or "cpu" (the all-reduce regions)
    who: np.ndarray  # [C] participant index (into Participants)
    arrival: np.ndarray  # [C] ns
    end: np.ndarray  # [C] ns
    exposed: np.ndarray  # [C] ns not overlapped by compute (CPU: all of it)
    step: np.ndarray  # [C] decode step index, -1 outside every decode step
    order: np.ndarray  # [C] its place among its participant's instances in that step (0, 1, ...)
    tid: np.ndarray  # [C] host thread that issued it (the range's thread; the launching call's)
    site: np.ndarray  # [C] names index of the region it was issued from (-1: none)
    name: np.ndarray  # [C] names index: the kernel, or the all-reduce region
    source: np.ndarray  # [C] its row in the trace: in Trace.ops (GPU) or Trace.ranges (CPU)


@dataclass
class Participants:
    """The ranks (the `ranks` section's groups: a rank's processes, or a process of unknown rank), or the one
    process of a run of one [P], each with its decode steps."""

    label: list[str]  # "rank 0", "pid 1234", or "" for a run of one process
    pid: list[int]  # the main process (-1 where the trace names none)
    rank: list[int]  # the rank where known, else the participant's place in the list
    rank_known: bool
    step_start: list[np.ndarray]  # per participant: [S_p] its decode steps' starts (trace clock)
    step_end: list[np.ndarray]
    step_index: list[
        np.ndarray
    ]  # [S_p] the decode step index of each (the step log's, the same on every rank)
    device: list[int] = field(default_factory=list)  # the GPU most of its collectives ran on (-1: the CPU)


def participants(groups: list, steps: list[dict | None]) -> Participants:
    """From the `ranks` section's groups (label, rank, pids) and each one's step rows ({start_ns, dur_ns, index},
    its decode steps joined to its own step log; None where it has none)."""
    known = all(g.rank is not None for g in groups)
    starts, ends, indices = [], [], []
    for rows in steps:
        rows = rows or {"start_ns": [], "dur_ns": [], "index": []}
        start = np.asarray(rows["start_ns"], dtype=np.int64)
        starts.append(start)
        ends.append(start + np.asarray(rows["dur_ns"], dtype=np.int64))
        indices.append(np.asarray(rows["index"], dtype=np.int64))
    return Participants(
        label=[g.label for g in groups],
        pid=[g.pids[0] if g.pids else -1 for g in groups],
        rank=[g.rank if known else i for i, g in enumerate(groups)],
        rank_known=known,
        step_start=starts,
        step_end=ends,
        step_index=indices,
    )


@dataclass
class Matched:
    """Instances matched across participants [M collectives x P participants]."""

    step: np.ndarray  # [M]
    order: np.ndarray  # [M]
    row: np.ndarray  # [M, P] index into Instances
    arrival: np.ndarray  # [M, P] ns
    spread: np.ndarray  # [M] last arrival minus first, >= 0
    last: np.ndarray  # [M] participant that arrived last
    lateness: np.ndarray  # [M, P] each one's arrival minus the first arrival
    unmatched_steps: int  # steps whose participants issued different numbers of collectives

    @cached_property
    def steps(self) -> np.ndarray:
        """[S'] the distinct steps of the matched collectives, ascending: factorised once for every table of them."""
        return np.unique(self.step)


def find_instances(
    trace: Trace,
    tree,
    op_range: np.ndarray,
    capture: np.ndarray,
    op_group: np.ndarray,
    range_group: np.ndarray,
    parts: Participants,
    kernel_names: np.ndarray,
    is_collective=is_collective_kernel,
) -> Instances | None:
    """Every collective of the run, or None where it holds none. `tree`, `op_range`, `capture`: the range tree,
    each GPU op's launching range and capture-time range (sections' Context); `op_group` [G], `range_group` [R]:
    the participant of each GPU op and range (-1: none known; such collectives are left out); `parts`: the
    participants with their steps (sets their `device`); `kernel_names`: the distinct name ids of the kernels
    (Context.kernel_keys.names, factorised once per run); `is_collective`: kernel name -> whether it is one."""
    o, r = trace.ops, trace.ranges
    kernel_names = {i for i in kernel_names.tolist() if is_collective(trace.names[i])}
    owner_all = np.where(capture >= 0, capture, op_range)  # [G] the range each op ran for, -1 none
    allreduce = trace.names.find(ALLREDUCE)
    # Kernels that ran for the all-reduce region are the collective too where they are not NCCL's (torch's
    # symmetric-memory all-reduce, `--tp-allreduce symm_mem`): a GPU run is never read by its host ranges.
    in_allreduce = (
        (owner_all >= 0) & (r.name[np.maximum(owner_all, 0)] == allreduce) if allreduce >= 0 else None
    )
    gpu = (o.kind == KERNEL) & np.isin(o.name, list(kernel_names))
    if in_allreduce is not None:
        gpu |= (o.kind == KERNEL) & in_allreduce
    if gpu.any():
        sel = np.flatnonzero(gpu)
        exposed = _not_overlapped(o, sel)
        sel, exposed = sel[op_group[sel] >= 0], exposed[op_group[sel] >= 0]
        who = op_group[sel]
        host_tid = o.api_tid[sel]
        # A kernel belongs to the step whose range holds the call that launched it (the GPU runs it later). One the
        # file gives no launching call (launched before a profiler's window opened: the previous step's, still
        # running) is in no step: its GPU start would put it in the step after its own (torch TP=2 on 2 H200s: 5
        # of rank 1's first-step all-reduces, that step then left out of the arrival spread as unequal).
        host_t, placeable = o.api_start[sel], o.api_start[sel] >= 0
        arrival, end = o.start[sel], o.end[sel]
        # The region a kernel ran for: its capture-time region (graph replay), else its launching one.
        owner = owner_all[sel]
        names, device, kind = o.name[sel], o.device[sel], "gpu"
    else:
        allreduce = trace.names.find(ALLREDUCE)
        sel = (
            np.flatnonzero((r.name == allreduce) & (range_group >= 0))
            if allreduce >= 0
            else np.zeros(0, np.int64)
        )
        if not len(sel):
            return None
        who = range_group[sel]
        host_tid, host_t, placeable = r.tid[sel], r.start[sel], np.ones(len(sel), dtype=bool)
        arrival, end = r.start[sel], r.end[sel]
        exposed = end - arrival  # gloo: the host waits inside the region, all of it is exposed
        owner = sel
        names, device, kind = r.name[sel], np.full(len(sel), -1, dtype=np.int64), "cpu"
    if not len(sel):
        return None
    site = _site(trace, tree, owner)
    step = np.full(len(sel), -1, dtype=np.int64)
    parts.device = []
    for p in range(len(parts.label)):
        mine = who == p
        starts, ends = parts.step_start[p], parts.step_end[p]
        k = np.searchsorted(starts, host_t[mine], side="right") - 1
        inside = (
            (k >= 0) & (host_t[mine] <= ends[np.maximum(k, 0)]) & placeable[mine]
            if len(starts)
            else np.zeros(mine.sum(), bool)
        )
        step[mine] = np.where(inside, parts.step_index[p][np.maximum(k, 0)] if len(starts) else -1, -1)
        parts.device.append(_most_common(device[mine]) if mine.any() else -1)
    by = np.lexsort((arrival, step, who))  # per participant, per step, in arrival order
    inst = Instances(kind, who[by], arrival[by], end[by], exposed[by], step[by], np.zeros(len(by), np.int64),
                     host_tid[by], site[by], names[by], sel[by])  # fmt: skip
    inst.order = _order_within(inst.who, inst.step)
    return inst


def _site(trace: Trace, tree, owner: np.ndarray) -> np.ndarray:
    """[C] names index of the program's region a collective was issued from: its owning range, looked past the
    all-reduce region itself (the CPU case, and NCCL kernels launched inside it) and past the communication
    library's own NVTX ranges (NCCL's domain wraps every call, e.g. `ncclAllReduce`, innermost around the kernel:
    naming it says nothing the collective's name does not), up to the first range that is neither."""
    r = trace.ranges
    allreduce_name = trace.names.find(ALLREDUCE)
    library = np.array([d in LIBRARY_DOMAINS for d in trace.domains], dtype=bool)  # [domains]
    out = np.full(len(owner), -1, dtype=np.int64)
    rows = owner[owner >= 0]
    # Each step moves every row whose range is the library's or the all-reduce one to its parent, where it has one;
    # ranges nest a few deep, so this ends in as many steps as the deepest such chain.
    while len(rows):
        parent = tree.parent[rows]
        skip = (library[r.domain[rows]] | (r.name[rows] == allreduce_name)) & (parent >= 0)
        if not skip.any():
            break
        rows = np.where(skip, parent, rows)
    out[owner >= 0] = r.name[rows]
    return out


def _not_overlapped(o, sel: np.ndarray) -> np.ndarray:
    """[C] ns of each selected op that no other kernel on its device overlaps (exposed communication)."""
    out = np.empty(len(sel), dtype=np.int64)
    is_coll = np.zeros(len(o), dtype=bool)
    is_coll[sel] = True
    for d in np.unique(o.device[sel]).tolist():
        compute = np.flatnonzero((o.kind == KERNEL) & ~is_coll & (o.device == d))
        covered = _covered_before(o.start[compute], o.end[compute])
        mine = o.device[sel] == d
        s, e = o.start[sel][mine], o.end[sel][mine]
        out[mine] = (e - s) - (covered(e) - covered(s))
    return out


def _covered_before(starts: np.ndarray, ends: np.ndarray):
    """F(t): ns of [t0, t) covered by the union of the intervals, vectorised over t."""
    if not len(starts):
        return lambda t: np.zeros(len(t), dtype=np.int64)
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], np.maximum.accumulate(ends[order])
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > e[:-1]
    block = np.cumsum(new) - 1
    bs = s[new]  # [B] merged busy blocks
    be = np.zeros(int(new.sum()), dtype=np.int64)
    np.maximum.at(be, block, e)
    before = np.concatenate([[0], np.cumsum(be - bs)])  # [B + 1] covered ns before each block

    def covered(t: np.ndarray) -> np.ndarray:
        j = np.searchsorted(bs, t, side="right") - 1  # the last block starting at or before t
        jj = np.maximum(j, 0)
        inside = np.clip(t - bs[jj], 0, be[jj] - bs[jj])
        return np.where(j >= 0, before[jj] + inside, 0)

    return covered


def _order_within(who: np.ndarray, step: np.ndarray) -> np.ndarray:
    """[C] 0, 1, ... within each run of equal (who, step) (rows sorted by them)."""
    n = len(who)
    if not n:
        return np.zeros(0, dtype=np.int64)
    new = np.ones(n, dtype=bool)
    new[1:] = (who[1:] != who[:-1]) | (step[1:] != step[:-1])
    first = np.maximum.accumulate(np.where(new, np.arange(n), 0))
    return np.arange(n) - first


def match(inst: Instances, n_participants: int) -> Matched:
    """Instance (step, n) of every participant, for the steps where every participant issued as many."""
    P = n_participants
    in_step = inst.step >= 0
    steps = np.unique(inst.step[in_step])
    counts = np.zeros((len(steps), P), dtype=np.int64)  # [S, P]
    np.add.at(counts, (np.searchsorted(steps, inst.step[in_step]), inst.who[in_step]), 1)
    same = (counts == counts[:, :1]).all(axis=1) & (counts[:, 0] > 0)
    good = steps[same]
    n_per = counts[same, 0]
    step_col = np.repeat(good, n_per)
    order_col = np.concatenate([np.arange(n) for n in n_per]) if len(n_per) else np.zeros(0, np.int64)
    rows = np.full((len(step_col), P), -1, dtype=np.int64)
    keep = in_step & np.isin(inst.step, good)
    # Position of (step, order) among the matched collectives: steps in order, then orders.
    offset = np.concatenate([[0], np.cumsum(n_per)[:-1]]) if len(n_per) else np.zeros(0, np.int64)
    pos = offset[np.searchsorted(good, inst.step[keep])] + inst.order[keep]
    rows[pos, inst.who[keep]] = np.flatnonzero(keep)
    arrival = inst.arrival[rows] if len(rows) else np.zeros((0, P), dtype=np.int64)
    first = arrival.min(axis=1) if len(rows) else np.zeros(0, dtype=np.int64)
    lateness = arrival - first[:, None]
    return Matched(
        step=step_col,
        order=order_col,
        row=rows,
        arrival=arrival,
        spread=lateness.max(axis=1) if len(rows) else np.zeros(0, dtype=np.int64),
        last=np.argmax(arrival, axis=1) if len(rows) else np.zeros(0, dtype=np.int64),
        lateness=lateness,
        unmatched_steps=int((~same & (counts.sum(axis=1) > 0)).sum()),
    )


def _most_common(values: np.ndarray) -> int:
    """The most frequent value (ties: the smallest). Not np.bincount: a device id is a number from a file, and a
    negative one fails bincount while a huge one (0xdeadbeef) asks it for gigabytes."""
    vals, counts = np.unique(values, return_counts=True)
    return int(vals[np.argmax(counts)])
