"""The steady state: per step, host and GPU time per region, with the capture, warm-up and prefill steps apart
(the arithmetic is analysis/steady.py's). Timelines only: ncu replays kernels alone."""

from __future__ import annotations

from roseprof.analysis.sections.base import Context, Section, SectionResult
from roseprof.analysis.sections.steps import step_names
from roseprof.analysis.steady import steady_state


def compute(ctx: Context) -> SectionResult:
    step_name, kind = step_names(ctx)
    unit = {"decode": "decode step", "profiler": "ProfilerStep"}.get(kind, step_name)
    rows = ctx.table("steps")
    region_cols = ctx.table("step_regions")
    steady = steady_state(
        ctx.trace, ctx.tree, ctx.gpu.op_range, ctx.capture, ctx.own_ns, rows, region_cols, ctx.log, unit,
        step_name, pairs=ctx.kernel_pairs if ctx.trace.has_gpu else None, step_pids=ctx.table("step_pids"),
    )  # fmt: skip
    return SectionResult({"steady": steady})


SECTION = Section(
    "steady", compute, applies=lambda trace: trace.kernel_metrics is None, absent={"steady": None}
)
