"""A stored run as every renderer sees it, loaded once: the run (id, manifest, folder), summary.json, the step and
ITL tables, telemetry, and the panels of analysis sections that have no built-in view. Renderers of one shape take
it: `TerminalRenderer(console).render(view)`, `RunDashboard().render(view, path)`, `ChromeExport().render(view,
path)`; none of them reads the run folder itself.

The tables are read on first use, so a view that is only printed (show) reads summary.json alone, and a damaged
steps.json is refused by the renderer that needs it, as before."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from roseprof.run import tables
from roseprof.run.store import Run


@dataclass
class RunView:
    run: Run
    summary: dict | None
    panels: list[dict] = field(
        default_factory=list
    )  # {"title", "columns", "rows", "note"}: analysis/sections/

    @classmethod
    def load(cls, run: Run, section_panels=None) -> RunView:
        """`section_panels`: summary -> panels (roseprof.api.section_panels; render/ never imports the analyses).
        A run with no summary.json (failed, or incomplete before analysis) has summary None."""
        summary = run.summary() if (run.path / "summary.json").is_file() else None
        panels = list(section_panels(summary)) if section_panels is not None and summary is not None else []
        return cls(run, summary, panels)

    @cached_property
    def steps(self) -> dict | None:
        """steps.json: {"regions", "rows", "run_starts"} (run/tables.py)."""
        return tables.read_steps(self.run.path)

    @cached_property
    def itl(self) -> list | None:
        """itl.json: per request, token times and ITL."""
        return tables.read_itl(self.run.path)

    @cached_property
    def telemetry(self) -> dict | None:
        return tables.read_telemetry(self.run.path)
