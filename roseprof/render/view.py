"""What renderers and exporters see: views as data, built in one place (roseprof.api: `run_view`, `diff_runs`).

RunView: a run (its id, manifest and where it is kept), its summary, the panels of analysis sections that have no
built-in view, and its tables (steps, ITL, telemetry, and for the export the trace), read on first use through the
`RunTables` the view was built with; DiffView: a diff's result, the two sides' pooled samples and both sides' runs.
Renderers of one shape take them: `TerminalRenderer(console).render(view)`, `RunDashboard().render(view, path)`,
`ChromeExport().render(view, path)`, and for a diff `TerminalDiff(console, top).render(view)`,
`DiffDashboard().render(view, path)`. None of them knows where or how a run is stored: this module imports nothing
of the store, so a run that is not a stored folder (a live one, say) renders through the same views.

A run's tables are read on first use, so a view that is only printed (show) reads summary.json alone, and a damaged
steps.json is refused by the renderer that needs it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Protocol


class RunRecord(Protocol):
    """A run as the views name it: its id, its manifest (tool, status, command, ...) and where it is kept."""

    @property
    def id(self) -> str: ...

    manifest: dict
    path: Path


class RunTables(Protocol):
    """A run's tables, each read when a renderer first asks (roseprof.api builds one over a stored run)."""

    def steps(self) -> dict | None: ...  # {"regions", "rows", "run_starts"[, "ranks"]}: per decode step

    def itl(self) -> list | None: ...  # per request, token times and ITL

    def telemetry(self) -> dict | None: ...  # GPU samples during a capture

    def trace(self): ...  # the model (roseprof.model.Trace)

    def op_regions(self, n_ops: int, n_names: int) -> dict | None: ...  # per GPU op, its launching region

    def step_log(self): ...  # the engine's step log (workload.steplog.StepLogRecords) or None

    def load_tokens(self) -> list | None: ...  # a load's per-request tokens (roseprof load) or None


@dataclass
class RunView:
    run: RunRecord
    summary: dict | None
    panels: list[dict] = field(
        default_factory=list
    )  # {"title", "columns", "rows", "note"}: analysis/sections/
    tables: RunTables | None = None  # None: a view of the summary alone

    @cached_property
    def steps(self) -> dict | None:
        return self.tables.steps() if self.tables is not None else None

    @cached_property
    def itl(self) -> list | None:
        return self.tables.itl() if self.tables is not None else None

    @cached_property
    def telemetry(self) -> dict | None:
        return self.tables.telemetry() if self.tables is not None else None

    @cached_property
    def load_tokens(self) -> list | None:
        return self.tables.load_tokens() if self.tables is not None else None

    @cached_property
    def step_log(self):
        """The engine's step log (a live run's: the server's steps), or None."""
        return self.tables.step_log() if self.tables is not None else None


@dataclass
class DiffView:
    """A diff as every diff renderer sees it (roseprof.api.diff_runs builds it).

    result   what `diff --json` prints: both sides ("a", "b"), the verdict, the method, the metrics (most moved
             first), the kernels new and vanished, the regressions and the gate's threshold
    samples  {"a"|"b": {"step_ns": [S] or None, "itl_ms": [T] or None}}: each side's runs' samples, pooled
    before   the runs of side a, oldest first; `after`: side b's"""

    result: dict
    samples: dict
    before: list[RunRecord]
    after: list[RunRecord]

    def default_path(self, dashboards_dir) -> Path:
        """Where the diff's dashboard goes in a dashboards folder: named by each side's latest run (and how many
        runs the side pools)."""
        a, b = self.result["a"], self.result["b"]
        return Path(dashboards_dir) / f"diff-{_file_side(a)}-vs-{_file_side(b)}.html"


def _file_side(side: dict) -> str:
    """A side in the diff dashboard's file name: its latest run's id less the capture time (`nsys-demo-8783`; the
    dashboard says the rest), kept short so that `dashboard: dashboards/diff-A-vs-B.html` fits 80 columns."""
    n = len(side.get("runs") or [])
    short = re.sub(r"^\d{8}T\d{6}Z-", "", side["id"])
    if len(short) > SIDE_CHARS:  # a long name: its start and the id's random end, which tells runs apart
        short = short[: SIDE_CHARS - 6] + "~" + short[-5:]
    return f"{short}-x{n}" if n > 1 else short


SIDE_CHARS = 20
