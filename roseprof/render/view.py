"""What renderers see, loaded once. RunView: a stored run (id, manifest, folder), summary.json, the step and ITL
tables, telemetry, and the panels of analysis sections that have no built-in view; DiffView: a diff's result, the
two sides' pooled samples and both sides' runs. Renderers of one shape take them: `TerminalRenderer(console)
.render(view)`, `RunDashboard().render(view, path)`, `ChromeExport().render(view, path)`, and for a diff
`TerminalDiff(console, top).render(view)`, `DiffDashboard().render(view, path)`; none of them reads the run folder
itself.

A run's tables are read on first use, so a view that is only printed (show) reads summary.json alone, and a damaged
steps.json is refused by the renderer that needs it, as before."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

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


@dataclass
class DiffView:
    """A diff as every diff renderer sees it (roseprof.api.diff_runs builds it).

    result   what `diff --json` prints: both sides ("a", "b"), the verdict, the method, the metrics (most moved
             first), the kernels new and vanished, the regressions and the gate's threshold
    samples  {"a"|"b": {"step_ns": [S] or None, "itl_ms": [T] or None}}: each side's runs' samples, pooled
    before   the runs of side a, oldest first; `after`: side b's"""

    result: dict
    samples: dict
    before: list[Run]
    after: list[Run]

    def default_path(self, dashboards_dir) -> Path:
        """Where the diff's dashboard goes in a dashboards folder: named by each side's latest run (and how many
        runs the side pools)."""
        a, b = self.result["a"], self.result["b"]
        return Path(dashboards_dir) / f"diff-{_file_side(a)}-vs-{_file_side(b)}.html"


def _file_side(side: dict) -> str:
    n = len(side.get("runs") or [])
    return f"{side['id']}-x{n}" if n > 1 else side["id"]
