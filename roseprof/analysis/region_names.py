"""One spelling of a region in every table: a range outside the default NVTX domain is `domain:name` (NCCL's own
`ncclAllReduce` range is `NCCL:ncclAllReduce`), a range of the default domain its name alone. The whole-run region
table (summary.json's `regions`: name and domain apart) has always been shown so, as `nsys stats` 2025 writes
it; the other tables (steady state, kernels by region, collectives, stragglers, step columns) name a region by its
range's name alone, so the analyses see each range under its spelled name and never write the bare one."""

from __future__ import annotations

import dataclasses

import numpy as np

from roseprof.model import Ranges, Trace


def spelled(trace: Trace) -> tuple[Trace, np.ndarray | None]:
    """(the trace as the analyses see it, [R] each range's own name index, or None where every range is of the
    default domain and the trace is returned as it is).

    The spelled names are interned into the trace's one Names table (new strings at its end: every index already
    in use keeps its string), so the tables that name regions by index (`op_regions`) resolve in the stored run."""
    r = trace.ranges
    other = np.flatnonzero(np.isin(r.domain, [i for i, d in enumerate(trace.domains) if d]))
    if not len(other):
        return trace, None
    pairs, inverse = np.unique(
        np.stack([r.domain[other], r.name[other]], axis=1), axis=0, return_inverse=True
    )
    spelled_ids = np.array(
        [trace.names.intern(f"{trace.domains[d]}:{trace.names[n]}") for d, n in pairs.tolist()],
        dtype=np.int64,
    )
    names = r.name.copy()
    names[other] = spelled_ids[inverse.ravel()]
    ranges = Ranges(r.start, r.end, names, r.domain, r.tid, r.style)
    return dataclasses.replace(trace, ranges=ranges), r.name
