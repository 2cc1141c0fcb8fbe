"""Every fixture through every renderer: a run's view is loaded once and handed to the terminal (80 and 120
columns), the run dashboard and the Chrome export; two imports of it go through diff's terminal and dashboard."""

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from roseprof import api
from roseprof.export.chrome import ChromeExport
from roseprof.render.diff_dashboard import DiffDashboard
from roseprof.render.run_dashboard import RunDashboard
from roseprof.render.terminal import TerminalRenderer
from roseprof.render.terminal_diff import TerminalDiff
from roseprof.run.store import RunStore
from tests.helpers import DATA, trace_folder_files, unpacked

SKIP_SUFFIXES = (".txt", ".py", ".jsonl", ".md", ".log", ".stamps.json")
# Not a run: a report newer than the installed nsys reads, and a trace with nothing in it (test_drivers.py has both).
NOT_RUNS = ("h100-nsys2025.3-matmul-nvtx.nsys-rep", "D-W-Chiang__JACC.jl__cg_trace.sqlite")
FIXTURES = [
    p
    for p in trace_folder_files()
    if not p.name.endswith(SKIP_SUFFIXES) and ".stats" not in p.name and p.name not in NOT_RUNS
]


def _steplog(path):
    base = str(path)
    for suffix in (".sqlite", ".json.gz", ".nsys-rep"):
        base = base.removesuffix(suffix)
    log = DATA.parent / f"{base}.steplog.jsonl"
    return str(log) if log.is_file() else None


@pytest.fixture(params=FIXTURES, ids=lambda p: str(p.relative_to(DATA)))
def imported(request, tmp_path):
    store = RunStore(tmp_path / "traces")
    path = request.param
    if path.name.endswith(".xz"):  # kept compressed: unpacked with its step logs (tests/data/README.md)
        db = unpacked(path, tmp_path)
        log = db.removesuffix(".sqlite") + ".steplog.jsonl"
        a = api.import_path(store, db, "a", log if Path(log).is_file() else None)
    else:
        a = api.import_path(store, str(path), "a", _steplog(path))
    return store, a


@pytest.mark.parametrize("width", [80, 120])
def test_the_terminal_fits(imported, width):
    _, run = imported
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None, force_terminal=False)
    TerminalRenderer(console).render(api.run_view(run))
    lines = out.getvalue().splitlines()
    assert run.id in lines[0]
    # Paths are printed whole (a terminal wraps them softly), everything else fits.
    assert all(len(line) <= width for line in lines if not line.startswith(("run folder:", "imported from:")))


def test_the_dashboard_and_the_export(imported, tmp_path):
    _, run = imported
    view = api.run_view(run)
    page = RunDashboard().render(view, tmp_path / "run.html").read_text()
    assert run.id in page
    out = ChromeExport().render(view, tmp_path / "run.json")
    events = json.loads(out.read_text())["traceEvents"]
    assert events or not view.summary["regions"]


def test_the_diff_renderers(imported, tmp_path):
    store, run = imported
    fixture = run.manifest["source"]
    api.import_path(store, fixture, "b", _steplog(fixture))
    view = api.diff_runs(store, ["a"], ["b"], None, None, False)
    # every kernel of both runs, by which the views tag a kernel whose base name another shares
    kernels = {k["name"] for r in (run, store.resolve("b")) for k in r.summary().get("kernels") or []}
    assert kernels <= set(view.result["verdict"]["kernel_names"])
    out = io.StringIO()
    TerminalDiff(Console(file=out, width=80, color_system=None, force_terminal=False), 10).render(view)
    assert out.getvalue().strip()
    page = DiffDashboard().render(view, view.default_path(tmp_path)).read_text()
    assert "roseprof diff" in page
