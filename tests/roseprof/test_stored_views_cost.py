"""`show`, `open` and `diff` of stored runs read the run folder's stored tables, never the raw capture, and import
only what they present with (issue 43: each under 2 s on the 1M-kernel run, where plotly's import alone, or the diff
statistics' and the capture pipeline's modules, were a fair part of the command). No timing here: each command runs
as a user's would, under an audit hook that records every file it opens and, at its end, which modules it imported;
the tests assert on those."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import DATA, roseprof, stderr_lines

CAPTURE = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.sqlite"
# What a command's imports are checked against: plotly (the dashboards' only), the diff's statistics, the capture
# pipeline and the tools' readers (an import's or a capture's only).
WATCHED = [
    "plotly",
    "roseprof.api.compare",
    "roseprof.api.intake",
    "roseprof.capture.pipeline",
    "roseprof.drivers",
]

# `roseprof ARGS` in a fresh interpreter, as the console script runs it, recording the files it opens (audit hook
# "open") and writing them, its exit code and which WATCHED modules it imported to the JSON file named by argv[1].
HARNESS = """
import json, os, sys
opened = []
sys.addaudithook(lambda event, args: opened.append(os.fsdecode(args[0]))
                 if event == "open" and isinstance(args[0], (str, bytes, os.PathLike)) else None)
report, watched = sys.argv[1], sys.argv[2].split(",")
sys.argv = ["roseprof", *sys.argv[3:]]
from roseprof.cli import main
code = 0
try:
    main()
except SystemExit as e:
    code = e.code if isinstance(e.code, int) else 0
with open(report, "w") as f:
    json.dump({"code": code, "opened": opened, "imported": [m for m in watched if m in sys.modules]}, f)
"""


def observed(tmp_path: Path, *args, env=None) -> dict:
    """What `roseprof ARGS` opened (paths inside tmp_path, relative to it) and imported, its exit code and output."""
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, "-c", HARNESS, str(report), ",".join(WATCHED), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "80", "DISPLAY": "", "BROWSER": "true", **(env or {})},
    )
    assert report.is_file(), proc.stderr
    out = json.loads(report.read_text())
    root = str(tmp_path) + os.sep
    out["opened"] = sorted({p[len(root) :] for p in out["opened"] if p.startswith(root)})
    out["stdout"], out["stderr"] = proc.stdout, proc.stderr
    return out


@pytest.fixture(scope="module")
def stored(tmp_path_factory):
    """Two imports of one real capture (so that diff has two sides), each with its dashboard, as a user makes them."""
    tmp = tmp_path_factory.mktemp("stored")
    dirs = ("--traces-dir", tmp / "traces", "--dashboards-dir", tmp / "dashboards")
    for name in ("before", "after"):
        proc = roseprof("import", CAPTURE, "--name", name, *dirs)
        assert proc.returncode == 0, proc.stderr
    runs = sorted(p.name for p in (tmp / "traces").iterdir() if not p.name.startswith("."))
    assert len(runs) == 2
    return tmp, runs, dirs


def read_only_stored_tables(opened: list[str], run: str) -> None:
    """Nothing under the run's raw/ (the capture) was opened, and nothing was written into the run folder."""
    inside = [p for p in opened if p.startswith(f"traces{os.sep}{run}{os.sep}")]
    assert inside, opened  # the run was read
    assert not [p for p in inside if f"{os.sep}raw{os.sep}" in p], inside


def test_show_reads_the_summary_and_imports_no_dashboard_or_diff_code(stored, tmp_path):
    tmp, (a, _), dirs = stored
    seen = observed(tmp, "show", a, *dirs)
    assert seen["code"] == 0 and a in seen["stdout"], seen["stderr"]
    read_only_stored_tables(seen["opened"], a)
    # its summary and manifest: no trace table (the 1M-kernel run's are 130 MB)
    assert {Path(p).name for p in seen["opened"] if a in p} == {"manifest.json", "summary.json"}, seen[
        "opened"
    ]
    assert seen["imported"] == [], seen["imported"]


def test_open_of_a_current_page_renders_nothing_and_imports_no_plotly(stored):
    tmp, (a, _), dirs = stored
    page = tmp / "dashboards" / f"{a}.html"
    assert page.is_file()  # the import wrote it
    before = page.read_bytes()
    seen = observed(tmp, "open", a, *dirs)
    assert seen["code"] == 0, seen["stderr"]
    assert seen["stdout"].strip() == f"dashboard: {page}"
    assert page.read_bytes() == before
    read_only_stored_tables(seen["opened"], a)
    assert seen["imported"] == [], seen["imported"]
    # A stale page is rendered again from the stored run, with plotly (the hook sees the imports it should).
    os.utime(page, (0, 0))
    seen = observed(tmp, "open", a, *dirs)
    assert seen["code"] == 0 and seen["stdout"].strip() == f"dashboard: {page}", seen["stderr"]
    assert page.stat().st_mtime > 0 and page.read_bytes()[:600] == before[:600]
    read_only_stored_tables(seen["opened"], a)
    assert seen["imported"] == ["plotly"], seen["imported"]


def test_diff_reads_stored_samples_not_the_trace_or_the_capture(stored):
    tmp, (a, b), dirs = stored
    seen = observed(tmp, "diff", a, b, *dirs)
    assert seen["code"] in (0, 1) and "dashboard: " in seen["stdout"], seen["stderr"]
    for run in (a, b):
        read_only_stored_tables(seen["opened"], run)
        names = {Path(p).name for p in seen["opened"] if run in p}
        assert "diff_samples.npz" in names and "gpu_ops.npz" not in names, names
    assert seen["imported"] == ["plotly", "roseprof.api.compare"], seen["imported"]


def test_without_plotly_a_current_page_still_opens_and_an_import_says_its_page_is_not_rendered(
    stored, tmp_path
):
    tmp, (a, _), dirs = stored
    hidden = tmp_path / "hide" / "plotly"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text('raise ImportError("plotly hidden by the test", name="plotly")\n')
    env = {"PYTHONPATH": os.pathsep.join([str(tmp_path / "hide"), os.environ.get("PYTHONPATH", "")])}
    proc = roseprof("open", a, *dirs, env={**env, "DISPLAY": "", "BROWSER": "true"})
    assert proc.returncode == 0 and proc.stdout.strip() == f"dashboard: {tmp / 'dashboards' / f'{a}.html'}"
    assert stderr_lines(proc) == []
    own = ("--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path / "dashboards")
    proc = roseprof("import", CAPTURE, *own, env=env)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    (run,) = [p.name for p in (tmp_path / "traces").iterdir() if not p.name.startswith(".")]
    assert f"dashboard: not rendered (plotly is not installed; `roseprof open {run}` renders it later)" in (
        stderr_lines(proc)
    )
    assert not (tmp_path / "dashboards" / f"{run}.html").exists()
