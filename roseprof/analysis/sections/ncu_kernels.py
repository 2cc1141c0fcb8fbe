"""Nsight Compute's kernel views: the kernel table from each launch's enclosing NVTX ranges (ncu replays kernels
alone: there is no timeline to attribute them by) and the `ncu` part (launches, per-kernel means, rule findings,
the GPU's peaks). The arithmetic is analysis/ncu.py's; this module is only its place among the sections."""

from __future__ import annotations

from roseprof.analysis import ncu
from roseprof.analysis.sections import kernels
from roseprof.analysis.sections.base import Context, Section, SectionResult


def compute(ctx: Context) -> SectionResult:
    trace = ctx.trace
    return SectionResult(
        {
            "kernels": ncu.kernels(trace),
            "kernel_regions": [],
            "kernels_outside_ranges": sum(1 for r in ncu.regions(trace.kernel_metrics) if r is None),
            "ncu": ncu.section(trace),
        }
    )


SECTION = Section(
    "ncu", compute, applies=lambda trace: trace.kernel_metrics is not None, checks=kernels.CHECKS
)
