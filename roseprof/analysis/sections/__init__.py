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
    live,
    loads,
    marks,
    ncu_kernels,
    operators,
    ranks,
    regions,
    serving,
    slo_capture,
    steady,
    steps,
)
from roseprof.analysis.sections.base import Context, Section, SectionResult

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
    slo_capture.SECTION,  # its breaches are show's first lines
    live.SECTION,  # before serving: show's first lines are the slowest requests
    serving.SECTION,
    operators.SECTION,
    loads.SECTION,
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
    "serving",  # a load (roseprof load: sections/serving.py)
    "loads",  # several loads in one run: a sweep or a repeat (sections/loads.py)
    "live",  # a load joined to the server's steps (roseprof live: sections/live.py)
)

# The built-in diff metrics' families (a section's diff_samples), in the order diff has always asked for them: its
# seeded bootstrap draws in that order, so the same runs keep the same intervals. Others follow, in SECTIONS' order.
DIFF_ORDER = ("steps", "itl", "regions", "kernels", "requests")

__all__ = [
    "SECTIONS",
    "SUMMARY_ORDER",
    "Context",
    "Section",
    "SectionResult",
    "stored_tables",
    "summary_checks",
]


def summary_checks(sections: list[Section] | None = None) -> dict:
    """{summary key: spec}: what each section says a stored summary.json holds in its part (run/checks.py's spec
    language), for the store that reads runs back (roseprof.api.open_store hands it over: run/ never imports
    analysis/). `sections`: SECTIONS as they are now, unless given."""
    chosen = SECTIONS if sections is None else sections
    return {key: spec for section in chosen for key, spec in section.checks.items()}


def stored_tables(tables: dict, sections: list[Section] | None = None) -> dict:
    """{part of the run folder: table}: the tables the sections say the run folder keeps (`Section.stores`), from
    the analysis' tables by name (analysis/summary.analyse). run/tables.py writes each part where it belongs."""
    return {
        part: tables[name]
        for section in (SECTIONS if sections is None else sections)
        for name, part in section.stores.items()
        if name in tables
    }
