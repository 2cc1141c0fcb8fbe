"""Nsight Compute's kernel views: the kernel table from each launch's enclosing NVTX ranges (ncu replays kernels
alone: there is no timeline to attribute them by) and the `ncu` part (launches, per-kernel means, rule findings,
the GPU's peaks). The arithmetic is analysis/ncu.py's; this module is only its place among the sections."""

from __future__ import annotations

from roseprof.analysis import ncu, ncu_diff, noise_floor
from roseprof.analysis.sections import kernels
from roseprof.analysis.sections.base import Context, Section, SectionResult
from roseprof.errors import RoseprofError


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


def diff_prepare(summary, steps, itl_rows, trace):
    """An ncu run's trace (its launches and their metrics), which its comparison reads launch by launch."""
    return trace if summary.get("ncu") else None


def diff_compare(before, after, metrics: list[dict], floor) -> tuple[list[dict], str] | None:
    """Two ncu runs: per-launch metrics (analysis/ncu_diff.py) instead of the kernel-time totals, which count the
    launches the filters chose. Its metrics draw from a generator of their own and carry no `per_step` key, so
    they are not a diff family. None where the runs are not both ncu runs."""
    ncu_sides = [all(d.summary.get("ncu") for d in g) for g in (before, after)]
    if any(ncu_sides) and (len(before) > 1 or len(after) > 1):
        raise RoseprofError("ncu runs are compared one a side: give one run each (or --latest)")
    if not all(ncu_sides):
        return None
    kept = [m for m in metrics if not m["name"].startswith(("kernels.", "gpu.kernel_"))]
    launches = ncu_diff.compare(before[0].sections["ncu"], after[0].sections["ncu"])
    return kept + noise_floor.apply(launches, floor), f"{ncu_diff.METHOD}; noise floor: {floor.describe()}"


SECTION = Section(
    "ncu",
    compute,
    applies=lambda trace: trace.kernel_metrics is not None,
    checks=kernels.CHECKS,
    diff_prepare=diff_prepare,
    diff_compare=diff_compare,
)
