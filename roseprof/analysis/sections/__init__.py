"""The analysis sections, in the order they compute (a section may read the tables of those before it).

Adding an analysis is one module here (a `SECTION = Section(...)`, see base.py) and one line in SECTIONS below;
docs/ARCHITECTURE.md has the recipe."""

from __future__ import annotations

from roseprof.analysis.sections import (
    collectives,
    gpu_ops,
    gpu_time,
    itl,
    kernels,
    marks,
    ncu_kernels,
    ranks,
    regions,
    steady,
    steps,
)
from roseprof.analysis.sections.base import Context, Section, SectionResult
from roseprof.run import checks

SECTIONS: list[Section] = [
    regions.SECTION,
    kernels.SECTION,
    ncu_kernels.SECTION,
    gpu_ops.SECTION,
    steps.SECTION,
    ranks.SECTION,
    steady.SECTION,
    itl.SECTION,
    marks.SECTION,
    collectives.SECTION,
    gpu_time.SECTION,
]

# summary.json's keys in the order it has always written them; a new section's keys follow, in SECTIONS' order.
SUMMARY_ORDER = (
    "schema",
    "regions",
    "kernels",
    "kernel_regions",
    "kernels_outside_ranges",
    "gpu_ops",
    "steps",
    "steady",
    "itl",
    "requests",
    "marks",
    "gpus",
    "gpu_idle_between_steps",
    "ranks",
    "rank_clock",
    "kernel_attribution",
    "warnings",
    "ncu",
    "collectives",  # several ranks (sections/collectives.py)
    "spikes",
)

# The built-in diff metrics' families (a section's diff_samples), in the order diff has always asked for them: its
# seeded bootstrap draws in that order, so the same runs keep the same intervals. Others follow, in SECTIONS' order.
DIFF_ORDER = ("steps", "itl", "regions", "kernels", "requests")

__all__ = ["SECTIONS", "SUMMARY_ORDER", "Context", "Section", "SectionResult", "register_checks"]


def register_checks() -> None:
    """Hand every section's checks to run/checks.py, which checks stored summaries without importing the analyses
    (run/ never imports analysis/). Done on import: every reader of runs (the CLI, through roseprof.api) imports
    the analyses first."""
    for section in SECTIONS:
        checks.SECTION_CHECKS.update(section.checks)


register_checks()
