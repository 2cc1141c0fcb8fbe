"""Marks (instant events): how many of each name."""

from __future__ import annotations

from roseprof.analysis.sections.base import Context, Section, SectionResult


def compute(ctx: Context) -> SectionResult:
    names = ctx.trace.names
    marks: dict[str, int] = {}
    for m in ctx.trace.marks.name.tolist():
        marks[names[m]] = marks.get(names[m], 0) + 1
    return SectionResult({"marks": [{"name": k, "count": v} for k, v in sorted(marks.items())]})


# What a stored summary.json must hold here (run/checks.py's spec language).
CHECKS = {"marks": ([{"name": str, "count": int}], None)}

SECTION = Section("marks", compute, checks=CHECKS)
