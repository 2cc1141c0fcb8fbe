"""Issue 45, as a new user met it: what `show`, `diff` and `ls` print at 80 columns, piped (COLUMNS=80)."""

import re

import pytest

from tests.helpers import DATA, roseprof

GRAPHS = DATA / "nsys" / "h100-nsys2025.3-roseinfer-graphs.sqlite"
GRAPHS_LOG = DATA / "nsys" / "h100-nsys2025.3-roseinfer-graphs.steplog.jsonl"
UNIT = r"(ns|µs|ms|s|tok/s|%)\b"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """Two imports of one engine run, in a user's checkout: dashboards in the relative folder `dashboards`."""
    root = tmp_path_factory.mktemp("newcomer")
    opts = ["--traces-dir", "traces", "--dashboards-dir", "dashboards"]
    for name in ("before", "after"):
        proc = roseprof("import", GRAPHS, "--steplog", GRAPHS_LOG, "--name", name, *opts, cwd=root)
        assert proc.returncode == 0, proc.stderr
    return root, opts


@pytest.mark.parametrize("width", (80, 100))
def test_show_never_splits_a_figure_from_its_unit_or_label(store, width):
    root, opts = store
    proc = roseprof("show", "after", *opts, cwd=root, env={"COLUMNS": str(width)})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for above, line in zip(lines, lines[1:]):
        head = line.strip()
        assert not re.match(UNIT, head), (above, line)  # `41.61 \nms`
        assert not (re.search(r"\bp\d\d$", above.rstrip()) and re.match(r"[-\d]", head)), (above, line)


def test_diff_dashboard_line_fits_80_columns(store):
    root, opts = store
    proc = roseprof("diff", "before", "after", *opts, cwd=root, env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    (line,) = [x for x in proc.stdout.splitlines() if x.startswith("dashboard: ")]
    assert len(line) <= 80, line
    assert (root / line.removeprefix("dashboard: ")).is_file()
    assert all(len(x.rstrip()) <= 80 for x in proc.stdout.splitlines()), proc.stdout


def test_dashboards_share_one_plotly_js_beside_them(store):
    root, opts = store
    proc = roseprof("diff", "before", "after", *opts, cwd=root, env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    folder = root / "dashboards"
    pages = sorted(folder.glob("*.html"))
    (js,) = folder.glob("plotly-*.min.js")
    assert len(pages) == 3  # two runs and their diff
    assert js.stat().st_size > 1_000_000  # the library itself, once, so the pages work offline
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert f'<script src="{js.name}"></script>' in text
        assert page.stat().st_size < 1_000_000, page  # no copy of plotly.js inside
    assert not list(folder.glob("*.part"))
