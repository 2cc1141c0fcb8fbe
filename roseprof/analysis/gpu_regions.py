"""GPU kernel time per region with CUDA-graph replays counted where they were captured: what every view shows.

`nsys stats` (and summary.json's `gpu_proj_ns` / `gpu_kernel_ns`) give a kernel to the ranges around the call
that launched it. A CUDA graph replay is one launch for all its kernels, so by that rule a graph-replayed
forward's attention, MLP and lm_head kernels all land in the one range around `cudaGraphLaunch`. Here a kernel
belongs to every range around its launching call *and* every range that was open on the capturing thread when
its graph node was made (graphs.capture_ranges): the union of the two chains, each region name counted once per
kernel. For a run without graph replays this equals `gpu_kernel_ns`.
"""

from __future__ import annotations

import numpy as np

from roseprof.analysis.ranges import RangeTree
from roseprof.analysis.stats import dense_ids
from roseprof.model import KERNEL, Trace


def kernel_range_pairs(
    tree: RangeTree, launch_range: np.ndarray, capture: np.ndarray, kernels: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(op, range) pairs: each kernel (row of `kernels`, indices into the ops) with every range enclosing its
    launch and every range enclosing its graph node's capture (a range may appear twice; callers dedupe)."""
    ops_out, ranges_out = [], []
    for first in (launch_range, capture):
        ops = kernels[first[kernels] >= 0]
        cur = first[ops]
        while len(cur):
            ops_out.append(ops)
            ranges_out.append(cur)
            up = tree.parent[cur]
            keep = up >= 0
            ops, cur = ops[keep], up[keep]
    if not ops_out:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(ops_out), np.concatenate(ranges_out)


# Largest (ops x keys) grid deduplicated with a bitmap (one byte a cell); a larger one is sorted (np.unique).
BITMAP_CELLS = 1 << 26


def gpu_ns_by_key(
    trace: Trace,
    tree: RangeTree,
    launch_range: np.ndarray,
    capture: np.ndarray,
    range_key: np.ndarray,
    op_group: np.ndarray | None = None,
    n_groups: int = 1,
    op_ns: np.ndarray | None = None,
    pairs: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(keys, [n_groups, len(keys)] kernel ns): per group of the op (e.g. the step that launched it; -1: none)
    and key of the region (`range_key` maps each range to one, e.g. its name), for the keys that have any. A
    kernel counts once per key even when both of its chains hold that region. op_ns: what each op counts
    (default its duration; the per-step views pass `stream_time.own_stream_ns`). pairs: kernel_range_pairs of
    these ranges, computed once per run (sections/base.py: Context.kernel_pairs) and shared by every caller."""
    ops = trace.ops
    if pairs is None:
        pairs = kernel_range_pairs(tree, launch_range, capture, np.flatnonzero(ops.kind == KERNEL))
    op_idx, rng = pairs
    if op_group is not None:  # one group (None): every pair counts, no mask over the millions of pairs
        live = op_group[op_idx] >= 0
        op_idx, rng = op_idx[live], rng[live]
    if not len(op_idx):
        return np.zeros(0, dtype=np.int64), np.zeros((n_groups, 0), dtype=np.int64)
    # Only the keys some pair has, in ascending order (what np.unique of the pairs' keys gave), found by a count
    # where the keys are small ids already (name ids, Context.region_keys' codes), else factorised over the ranges
    # (a few hundred thousand), never over the (op, range) pairs (millions).
    if len(range_key) and range_key.min() >= 0 and range_key.max() < 4 * len(range_key) + 1024:
        keys, key = dense_ids(range_key[rng], int(range_key.max()) + 1)
    else:
        all_keys, code = np.unique(range_key, return_inverse=True)
        keys, key = dense_ids(code.ravel()[rng], len(all_keys))
        keys = all_keys[keys]
    # Each (op, key) once: a kernel counts once per key, however many of its ranges have that key.
    n_keys = len(keys)
    cell = op_idx.astype(np.int64) * n_keys + key
    if len(ops) * n_keys <= BITMAP_CELLS:
        seen = np.zeros(len(ops) * n_keys, dtype=bool)
        seen[cell] = True
        pair = np.flatnonzero(seen)
    else:
        pair = np.unique(cell)
    op_idx, key = pair // n_keys, pair % n_keys
    weight = (ops.end - ops.start) if op_ns is None else op_ns
    # Integer ns summed in float64 are exact below 2^53 ns (104 days) per cell; np.add.at is several times slower.
    out = np.bincount(
        key if op_group is None else op_group[op_idx] * n_keys + key,
        weights=weight[op_idx],
        minlength=n_groups * n_keys,
    ).reshape(n_groups, n_keys)
    return keys, out.astype(np.int64)
