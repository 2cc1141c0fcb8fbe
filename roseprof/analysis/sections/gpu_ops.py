"""GPU ops of every kind: counts, kernel time, which launching calls were found, and each op's regions (the
export's args)."""

from __future__ import annotations

import numpy as np

from roseprof.analysis.graphs import attribution
from roseprof.analysis.sections.base import Context, Section, SectionResult
from roseprof.model import KERNEL, MEMCPY, MEMSET


def compute(ctx: Context) -> SectionResult:
    trace = ctx.trace
    ops = trace.ops
    is_kernel = ops.kind == KERNEL
    summary = {
        "gpu_ops": {
            "kernels": int(is_kernel.sum()),
            "kernel_ns": int((ops.end - ops.start)[is_kernel].sum()),
            "memcpy": int((ops.kind == MEMCPY).sum()),
            "memset": int((ops.kind == MEMSET).sum()),
        }
        if trace.has_gpu
        else None,
        # Only where the tool recorded the calls that launched kernels (not ncu, which records none).
        "kernel_attribution": attribution(trace, ctx.gpu.op_range, ctx.capture)
        if trace.has_gpu and (ops.api_tid >= 0).any()
        else None,
    }
    # Per GPU op: the innermost launching region and the capture-time region, as names (the export's args).
    return SectionResult(summary, {"op_regions": _op_regions(trace, ctx.gpu.op_range, ctx.capture)})


def _op_regions(trace, launch_range: np.ndarray, capture: np.ndarray) -> dict:
    out = {}
    for key, rng in (("region", launch_range), ("capture_region", capture)):
        col = np.full(len(rng), -1, dtype=np.int64)
        col[rng >= 0] = trace.ranges.name[rng[rng >= 0]]
        out[key] = col
    return out


SECTION = Section("gpu_ops", compute, stores={"op_regions": "op_regions"})
