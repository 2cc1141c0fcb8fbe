"""A kernel's own time on its stream: the part of its duration that no earlier kernel of the same stream covers.

Kernels of one stream run one after the other, except where the program lets the next start early: with
programmatic dependent launch (PDL, Hopper and later) a kernel's blocks become resident, and the tools' record
of it starts, while the kernel before still runs; it then waits (griddepcontrol.wait) for that kernel to finish.
nsys and CUPTI time a kernel from its first block to its last, so a step's summed kernel durations count that
overlap twice and charge each kernel for its wait (a real capture of the engine's batch-1 step with PDL:
tests/data/nsys/h100-nsys2025.3-roseinfer-pdl.sqlite, where a third of the summed durations is overlap).

own = end - max(start, the latest end among the stream's earlier kernels), at least 0. Where a stream's kernels do
not overlap it is each kernel's duration; summed over a stream it is the stream's busy time (the union of its
kernels' intervals); and each kernel is charged for the time by which it extends the stream, its share of that
stream's critical path. Kernels of different streams may still overlap: that is concurrency, counted in each.
A stream is (device, stream id): the model keeps no process per GPU op, so two processes sharing a GPU whose
streams have the same id would be taken for one stream (no fixture has that; each rank of a multi-GPU run has
its own device).
"""

from __future__ import annotations

import numpy as np

from roseprof.model import KERNEL


def own_stream_ns(ops) -> np.ndarray:
    """[G] int64: each kernel's own time on its (device, stream); 0 for copies, sets and host ops."""
    out = np.zeros(len(ops.start), dtype=np.int64)
    k = np.flatnonzero(ops.kind == KERNEL)
    if not len(k):
        return out
    # by stream, then start; of two kernels with the same start the shorter comes first and is charged first
    k = k[np.lexsort((ops.end[k], ops.start[k], ops.stream[k], ops.device[k]))]
    start, end = ops.start[k].astype(np.int64), ops.end[k].astype(np.int64)
    key = np.stack([ops.device[k], ops.stream[k]])
    first = np.ones(len(k), dtype=bool)
    first[1:] = (key[:, 1:] != key[:, :-1]).any(axis=0)
    bounds = np.append(np.flatnonzero(first), len(k))
    covered = start.copy()  # where each kernel's own time begins
    for a, b in zip(bounds[:-1], bounds[1:]):  # one pass per stream: a handful in a trace
        if b - a > 1:
            covered[a + 1 : b] = np.maximum(start[a + 1 : b], np.maximum.accumulate(end[a : b - 1]))
    out[k] = np.maximum(end - covered, 0)
    return out
