"""Range nesting, self time, and the GPU work each range launched (Nsight Systems' projection rule).

A GPU op belongs to a range when its launching CUDA API call lies inside the range on the same thread,
as in `nsys stats` (nvtx_gpu_proj / nvtx_kern_sum): the innermost such range and every range enclosing it.
A range's projection spans from its first op's start to its last op's end; its kernel time is the sum of
its kernels' durations. A GPU range (one on a GPU track, model.gpu_track: a phase of a kernel launch, read from
the kernel's own stamps) is GPU time itself: its projection is its own span, and so is its kernel time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class RangeTree:
    parent: np.ndarray  # [R] index of the tightest enclosing range on the same thread, -1 for roots
    depth: np.ndarray  # [R] 0 for roots
    self_ns: np.ndarray  # [R] duration minus the durations of direct children


def build_tree(start: np.ndarray, end: np.ndarray, tid: np.ndarray) -> RangeTree:
    """Ranges must be sorted by (tid, start, end descending), as NsysTrace keeps them.

    A range's parent is the nearest earlier range of its thread that ends at or after it does (what a stack of
    open ranges holds on top once those ending before it are popped: finished siblings, or start/end ranges that
    overlap without enclosing). Found for all ranges at once by pointer jumping: each range's candidate starts at
    the range before it and, while the candidate ends before the range, moves to the candidate's own candidate;
    every range skipped so ends before the range, so the first candidate that does not is the parent. The jumps
    double, so a thread of R ranges takes about log2(R) passes (a Python loop over 232k ranges took 0.5 s)."""
    n = len(start)
    end = np.asarray(end)
    first = np.ones(n, dtype=bool)  # [R] the first range of its thread
    first[1:] = tid[1:] != tid[:-1]
    # [R] each range's candidate: the range before it, -1 for a thread's first
    parent = np.arange(-1, n - 1, dtype=np.int64)
    parent[first] = -1
    todo = np.flatnonzero(parent >= 0)
    while len(todo):
        cand = parent[todo]
        short = end[cand] < end[todo]  # the candidate ends before the range: not its parent
        todo = todo[short]
        parent[todo] = parent[cand[short]]
        todo = todo[parent[todo] >= 0]
    depth = _depth(parent)
    dur = end - start
    child_sum = np.zeros(n, dtype=np.int64)
    has_parent = parent >= 0
    np.add.at(child_sum, parent[has_parent], dur[has_parent])
    return RangeTree(parent=parent, depth=depth, self_ns=dur - child_sum)


def _depth(parent: np.ndarray) -> np.ndarray:
    """[R] each range's number of ancestors: list ranking by pointer jumping (log2 of the depth in passes). Each
    range holds a count and a link up, its depth being the count plus the depth where the link points; a pass
    adds the linked range's count and takes over its link, until every link is past the root."""
    count = (parent >= 0).astype(np.int64)
    up = parent.copy()
    todo = np.flatnonzero(up >= 0)
    while len(todo):
        above = up[todo]
        count[todo], up[todo] = count[todo] + count[above], up[above]  # both read before either is written
        todo = todo[up[todo] >= 0]
    return count


def innermost_range(
    start: np.ndarray,
    end: np.ndarray,
    tid: np.ndarray,
    tree: RangeTree,
    q_start: np.ndarray,
    q_end: np.ndarray,
    q_tid: np.ndarray,
) -> np.ndarray:
    """For each interval [q_start, q_end] on thread q_tid, the innermost range enclosing it, or -1."""
    out = np.full(len(q_start), -1, dtype=np.int64)
    if len(start) == 0 or len(q_start) == 0:
        return out
    threads = np.unique(q_tid)
    for t in threads:
        # One thread (the usual capture): every call, without a mask or a gather.
        qi = np.flatnonzero(q_tid == t) if len(threads) > 1 else np.arange(len(q_start))
        ri = np.flatnonzero(tid == t)  # contiguous and sorted by start (NsysTrace's order)
        if len(ri) == 0:
            continue
        lo = ri[0]
        # Candidate: the last range on this thread starting at or before the call; then climb its parents
        # until one also ends after the call (depth iterations, vectorised over the calls not settled yet: a
        # call whose candidate encloses it, or that has none, stays so).
        pos = np.searchsorted(start[ri], q_start[qi], side="right") - 1
        cand = np.where(pos >= 0, pos + lo, -1)
        q_end_i = q_end[qi]
        todo = np.flatnonzero(cand >= 0)
        for _ in range(int(tree.depth[ri].max()) + 1):
            todo = todo[end[cand[todo]] < q_end_i[todo]]  # the candidates that end before their call
            if not len(todo):
                break
            cand[todo] = tree.parent[cand[todo]]
            todo = todo[cand[todo] >= 0]
        out[qi] = cand
    return out


@dataclass
class GpuAttribution:
    op_range: np.ndarray  # [G] innermost range of each op, -1 if none
    proj_start: np.ndarray  # [R] first op start under the range (inclusive of descendants), or max int
    proj_end: np.ndarray  # [R] last op end, or min int
    op_count: np.ndarray  # [R] ops launched under the range
    kernel_ns: np.ndarray  # [R] kernel time launched under the range


def attribute_gpu_ops(
    start, end, tid, tree: RangeTree, op_kind, op_start, op_end, api_start, api_end, api_tid, on_gpu=None
) -> GpuAttribution:
    """on_gpu: [R] which ranges are GPU ranges (None: none)."""
    n = len(start)
    has_api = api_tid >= 0
    op_range = np.full(len(op_start), -1, dtype=np.int64)
    op_range[has_api] = innermost_range(
        start, end, tid, tree, api_start[has_api], api_end[has_api], api_tid[has_api]
    )
    big = np.iinfo(np.int64).max
    proj_start = np.full(n, big, dtype=np.int64)
    proj_end = np.full(n, -big, dtype=np.int64)
    op_count = np.zeros(n, dtype=np.int64)
    kernel_ns = np.zeros(n, dtype=np.int64)
    inside = op_range >= 0
    r = op_range[inside]
    np.minimum.at(proj_start, r, op_start[inside])
    np.maximum.at(proj_end, r, op_end[inside])
    op_count += np.bincount(r, minlength=n)
    is_kernel = op_kind[inside] == 0
    kernel_ns += np.bincount(
        r[is_kernel], weights=(op_end - op_start)[inside][is_kernel], minlength=n
    ).astype(np.int64)
    # Fold children into parents, deepest first, so every enclosing range counts the op too.
    for d in range(int(tree.depth.max()) if n else 0, 0, -1):
        idx = np.flatnonzero((tree.depth == d) & (op_count > 0))
        if len(idx) == 0:
            continue
        p = tree.parent[idx]
        np.minimum.at(proj_start, p, proj_start[idx])
        np.maximum.at(proj_end, p, proj_end[idx])
        np.add.at(op_count, p, op_count[idx])
        np.add.at(kernel_ns, p, kernel_ns[idx])
    if on_gpu is not None and on_gpu.any():  # no op is launched from a GPU track: these held none until now
        proj_start[on_gpu], proj_end[on_gpu] = start[on_gpu], end[on_gpu]
        kernel_ns[on_gpu] = (end - start)[on_gpu]
    return GpuAttribution(op_range, proj_start, proj_end, op_count, kernel_ns)
