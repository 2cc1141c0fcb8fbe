"""Kernels replayed by CUDA graphs, attributed to the regions that were open when the graph was captured.

A graph replay is one launch (cudaGraphLaunch) for all of its kernels, so the launch rule of ranges.py puts
every one of them under the range around the launch (e.g. `roseinfer.model.forward`). When the trace has the
graph's nodes (nsys `--cuda-graph-trace=node`), each replayed kernel names its node; following clones back to
the node that stream capture made gives the thread and time of the capture, and the innermost range open on
that thread then is the region the kernel belongs to: the per-part breakdown of an eager step, for graphs.
"""

from __future__ import annotations

import numpy as np

from roseprof.analysis.ranges import RangeTree, innermost_range
from roseprof.analysis.stats import dense_ids
from roseprof.model import KERNEL, Trace

MAX_CLONE_DEPTH = 16  # graphs cloned from clones: more than a few levels never happens; bounds a cycle


def capture_sites(trace: Trace) -> tuple[np.ndarray, np.ndarray]:
    """For each op: (time, thread) at which its graph node was first made, or (-1, -1) for ops not replayed
    by a graph or whose node the trace does not have."""
    ops, nodes = trace.ops, trace.graph_nodes
    t = np.full(len(ops), -1, dtype=np.int64)
    tid = t.copy()
    if not len(nodes) or not (ops.graph_node >= 0).any():
        return t, tid
    # nsys writes a node id twice when a node is cloned at instantiation: once made, once as the clone of its
    # original (seen with nsys 2025.3: tests/data/nsys/h100-nsys2025.3-roseinfer-graphs.sqlite). Look up the
    # clone record first, so the original's capture site is followed.
    order = np.lexsort((-nodes.original, nodes.node))
    keys = nodes.node[order]

    def lookup(ids: np.ndarray) -> np.ndarray:
        """Row of each node id in `nodes`, -1 where absent."""
        pos = np.minimum(np.searchsorted(keys, ids), len(keys) - 1)
        return np.where(keys[pos] == ids, order[pos], -1)

    row = lookup(ops.graph_node)
    # Follow clones to the original node, a level at a time; a clone whose original is missing keeps its
    # own creation site.
    moving = row >= 0
    for _ in range(MAX_CLONE_DEPTH):
        idx = np.flatnonzero(moving)
        idx = idx[nodes.original[row[idx]] >= 0]
        if not len(idx):
            break
        parent = lookup(nodes.original[row[idx]])
        ok = parent >= 0
        row[idx[ok]] = parent[ok]
        moving[:] = False
        moving[idx[ok]] = True
    found = row >= 0
    t[found], tid[found] = nodes.start[row[found]], nodes.tid[row[found]]
    return t, tid


def capture_ranges(trace: Trace, tree: RangeTree) -> np.ndarray:
    """[G] the innermost range open on the capturing thread when each op's graph node was made, or -1."""
    t, tid = capture_sites(trace)
    out = np.full(len(trace.ops), -1, dtype=np.int64)
    has = t >= 0
    if has.any() and len(trace.ranges):
        r = trace.ranges
        out[has] = innermost_range(r.start, r.end, r.tid, tree, t[has], t[has], tid[has])
    return out


def fold_to_ancestors(per_range: np.ndarray, tree: RangeTree) -> np.ndarray:
    """Inclusive totals: each range's value plus its descendants' (deepest first)."""
    out = per_range.astype(np.int64).copy()
    for d in range(int(tree.depth.max()) if len(out) else 0, 0, -1):
        idx = np.flatnonzero((tree.depth == d) & (out != 0))
        if len(idx):
            np.add.at(out, tree.parent[idx], out[idx])
    return out


def graph_kernel_ns(trace: Trace, tree: RangeTree, capture: np.ndarray) -> np.ndarray:
    """[R] kernel time of graph-replayed kernels captured inside each range (inclusive of its children)."""
    ops = trace.ops
    sel = (ops.kind == KERNEL) & (capture >= 0)
    per_range = np.bincount(
        capture[sel], weights=(ops.end - ops.start)[sel], minlength=len(trace.ranges)
    ).astype(np.int64)
    return fold_to_ancestors(per_range, tree)


def is_graph_launch(trace: Trace) -> np.ndarray:
    """[G] ops launched by a graph launch call (cudaGraphLaunch, cuGraphLaunch, hipGraphLaunch...)."""
    ops = trace.ops
    out = ops.graph_node >= 0
    named = np.flatnonzero(ops.api_name >= 0)
    if len(named):
        # A table over the interned names, indexed by the ops' name ids: no factorisation of the ops' column.
        graph = np.fromiter(
            ("GraphLaunch" in v for v in trace.names.values), dtype=bool, count=len(trace.names)
        )
        out[named] |= graph[ops.api_name[named]]
    return out


def placed_kernels(trace: Trace, launch_range: np.ndarray, capture: np.ndarray) -> np.ndarray:
    """[G] bool: the kernels some region accounts for (the conservation line's rule): where their graph node was
    captured, or else where a region launched them."""
    return (trace.ops.kind == KERNEL) & ((capture >= 0) | (launch_range >= 0))


def attribution(trace: Trace, launch_range: np.ndarray, capture: np.ndarray) -> dict:
    """The conservation line: how much kernel time some region accounts for, and which kernels none does."""
    ops = trace.ops
    k = ops.kind == KERNEL
    dur = (ops.end - ops.start).astype(np.int64)
    graph = is_graph_launch(trace) & k
    by_capture = k & (capture >= 0)
    placed = placed_kernels(trace, launch_range, capture)
    outside = k & ~placed
    total = int(dur[k].sum())
    attributed = int(dur[placed].sum())
    missing = []
    if outside.any():
        ids, inverse = np.unique(ops.name[outside], return_inverse=True)
        ns = np.bincount(inverse, weights=dur[outside])
        count = np.bincount(inverse)
        for j in np.argsort(-ns)[:10]:
            missing.append({"name": trace.names[int(ids[j])], "count": int(count[j]), "total_ns": int(ns[j])})
    return {
        "kernel_ns": total,
        "attributed_ns": attributed,
        "attributed_pct": 100.0 * attributed / total if total else None,
        "graph_replayed_ns": int(dur[graph].sum()),
        "graph_by_capture_ns": int(dur[by_capture].sum()),
        "outside_regions": missing,
    }


def graph_warning(trace: Trace, capture: np.ndarray) -> str | None:
    """Said once when graph replays were seen but their kernels cannot be placed in capture-time regions."""
    ops = trace.ops
    graph = is_graph_launch(trace) & (ops.kind == KERNEL)
    if not graph.any() or (capture[graph] >= 0).any():
        return None
    if trace.tool.name != "nsys":
        why = (
            f"{trace.tool.name} does not record where graph nodes were captured (roseprof nsys, with nsys 2025+, "
            "places them in their capture-time regions)"
        )
    elif not len(trace.graph_nodes):
        why = "the trace has no CUDA graph node table (capture with nsys 2025+ and --cuda-graph-trace=node)"
    else:
        why = "their graph nodes were not made inside any range on the capturing thread"
    return (
        f"{int(graph.sum())} kernels were replayed by CUDA graphs and are counted as whole graphs under the "
        f"region that launched the graph: {why}"
    )


def step_graph_columns(rows: dict, trace: Trace, capture: np.ndarray, own_ns: np.ndarray) -> list[str]:
    """Add `graph:<region>` columns to the per-step rows: GPU time of graph replays launched in each step, by
    the innermost capture-time region. Each kernel counts its own time on its stream (`own_ns`, [G] from
    `stream_time.own_stream_ns`: its
    duration less what an earlier kernel of the stream still covers), so that under programmatic dependent
    launches a kernel is not charged for waiting on the one before and a step's regions add up to its stream's
    busy time; without overlap that is the kernel time. Returns the region names, largest total first."""
    ops = trace.ops
    sel = np.flatnonzero((ops.kind == KERNEL) & (capture >= 0) & (ops.api_start >= 0))
    if not len(sel) or not rows or not rows.get("start_ns"):
        return []
    starts = np.asarray(rows["start_ns"], dtype=np.int64)
    ends = starts + np.asarray(rows["dur_ns"], dtype=np.int64)
    api = ops.api_start[sel]
    step = np.searchsorted(starts, api, side="right") - 1
    inside = (step >= 0) & (api <= ends[np.maximum(step, 0)])
    sel, step = sel[inside], step[inside]
    if not len(sel):
        return []
    region = trace.ranges.name[capture[sel]]
    ids, inverse = dense_ids(region, len(trace.names))  # name ids: a count, not a sort of the kernels
    matrix = np.zeros((len(starts), len(ids)), dtype=np.int64)
    np.add.at(matrix, (step, inverse), own_ns[sel])
    order = np.argsort(-matrix.sum(axis=0), kind="stable")
    names = []
    for j in order:
        name = trace.names[int(ids[j])]
        rows[f"graph:{name}"] = matrix[:, j].tolist()
        names.append(name)
    return names
