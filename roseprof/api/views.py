"""Views as data, built here only: a stored run's `RunView` (its summary, its sections' panels, its tables read on
first use) for the terminal, the run dashboard and the Chrome export; the store that reads runs back with the
sections' checks. Renderers and exporters take the views and never read a run folder (render/view.py)."""

from __future__ import annotations

import os
from pathlib import Path

from roseprof.api.sections import section_panels, summary_checks
from roseprof.errors import RoseprofError
from roseprof.render.view import RunView
from roseprof.run import tables
from roseprof.run.store import Run, RunStore
from roseprof.workload.steplog import read_steplog

_READ = object()  # run_view's default: the summary is read from the run


def open_store(root: str | os.PathLike) -> RunStore:
    """The traces folder, whose runs are read back checked against every analysis section's checks."""
    return RunStore(root, summary_checks())


class StoredTables:
    """A stored run's tables (render/view.py: RunTables), each read from its folder when first asked for."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def steps(self) -> dict | None:
        return tables.read_steps(self.folder)

    def itl(self) -> list | None:
        return tables.read_itl(self.folder)

    def telemetry(self) -> dict | None:
        return tables.read_telemetry(self.folder)

    def trace(self):
        return tables.read_trace(self.folder)

    def op_regions(self, n_ops: int, n_names: int) -> dict | None:
        return tables.read_op_regions(self.folder, n_ops, n_names)

    def step_log(self):
        path = tables.steplog_path(self.folder)
        if not path.is_file():  # a live run keeps the server's steps as it sent them (api/live.py)
            from roseprof.api.live import STEPS_FILE

            path = self.folder / "raw" / STEPS_FILE
        return read_steplog(str(path)) if path.is_file() else None

    def load_tokens(self) -> list | None:
        return tables.read_load_tokens(self.folder)


def run_view(run: Run, summary=_READ) -> RunView:
    """A stored run as every run renderer takes it: its summary (read here unless given; None where the run has
    none: failed, or incomplete before analysis), the panels of the sections that offer them, its tables."""
    if summary is _READ:
        summary = run.summary() if run.has_summary() else None
    panels = section_panels(summary) if summary is not None else []
    return RunView(run, summary, panels, StoredTables(run.path))


def ensure_dashboard(run: Run, dashboards_dir) -> Path:
    """The run's dashboard in the dashboards folder, rendered again where it is missing, older than the run or of
    another renderer's version."""
    from roseprof.render.page import is_current

    path = Path(dashboards_dir) / f"{run.id}.html"
    if not is_current(path, run.changed()):
        from roseprof.render.run_dashboard import RunDashboard  # plotly: only where the page is rendered

        view = run_view(run)
        if view.summary is None:
            run.summary()  # no summary.json: refused in one line, in the store's words
        RunDashboard().render(view, path)
    return path


def _export_path(run, out: str | None) -> Path:
    """The file an export writes: `out`, else the run's trace.chrome.json.gz. A folder is no file to write (the
    export is written beside its name as NAME.part, then renamed onto it)."""
    if not out:
        return run.path / "trace.chrome.json.gz"
    if Path(out).is_dir():
        raise RoseprofError(
            f"{out} is a folder: name the file to write, e.g. {Path(out) / run.id}.chrome.json.gz"
        )
    return Path(out)


def export_chrome(store: RunStore, ref: str, out: str | None) -> Path:
    """`roseprof export --format chrome`: a stored run as Chrome trace-event JSON (Perfetto opens it)."""
    from roseprof.export.chrome import ChromeExport

    run = store.resolve(ref)
    if tables.is_load(run.manifest):  # a load: its requests and tokens, one track per request
        from roseprof.export.load_chrome import write_load_chrome

        rows = tables.read_load_tokens(run.path)
        if rows is None:
            raise RoseprofError(f"run {run.id} has no {tables.LOAD_TOKENS}: nothing to export")
        path = _export_path(run, out)
        from roseprof.api.load import load_label

        loads = run.summary().get("loads")
        labels = None
        if loads:
            sweep, repeat = loads["kind"] == "sweep", loads.get("repeat", 1)
            labels = [load_label(p, k, repeat, sweep) for k, p in enumerate(loads["parts"])]
        return write_load_chrome(rows, tables.read_load_metrics(run.path), run.id, path, labels)
    if not tables.has_trace(run.path):
        raise RoseprofError(
            f"run {run.id} has no stored trace (status {run.manifest.get('status')}): nothing to export"
        )
    path = _export_path(run, out)
    # The export reads the stored trace, steps and telemetry, never summary.json: a run whose summary is damaged
    # still exports.
    return ChromeExport().render(run_view(run, summary=None), path)
