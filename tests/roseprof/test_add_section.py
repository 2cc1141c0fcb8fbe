"""The "add an analysis" recipe (docs/ARCHITECTURE.md) works: a toy section, one module's worth of code plus its
line in analysis/sections/SECTIONS, reaches summary.json, `show`, the run dashboard and `diff` with no other file
touched."""

import json

import pytest

from roseprof import api
from roseprof.analysis import sections
from roseprof.analysis.sections import Context, Section, SectionResult
from tests.helpers import DATA, run_cli

CPU = DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite"


# --- what a new analysis module holds -------------------------------------------------------------------------
def compute(ctx: Context) -> SectionResult:
    names = {int(n) for n in ctx.trace.ranges.name}
    return SectionResult(
        {"toy_ranges": {"ranges": len(ctx.trace.ranges.start), "names": len(names)}},
        {
            "toy_table": {"ids": sorted(names)}
        },  # a named table: later sections read it with ctx.table("toy_table")
    )


def diff_metrics(before, after) -> list[dict]:
    a = sum(r.summary["toy_ranges"]["ranges"] for r in before) / len(before)
    b = sum(r.summary["toy_ranges"]["ranges"] for r in after) / len(after)
    return [{"name": "toy_ranges.ranges", "a": a, "b": b}]


def panels(summary: dict) -> list[dict]:
    toy = summary.get("toy_ranges") or {}
    return [
        {
            "title": "toy: ranges per name",
            "columns": ["ranges", "names"],
            "rows": [[toy["ranges"], toy["names"]]],
        }
    ]


TOY = Section(
    "toy_ranges",
    compute,
    checks={"toy_ranges": ({"ranges": int, "names": int}, None)},
    diff_metrics=diff_metrics,
    panels=panels,
)
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def toy_registered():
    """The recipe's registration line (`SECTIONS.append` here, an entry in the list there), undone after."""
    sections.SECTIONS.append(TOY)
    yield
    sections.SECTIONS.remove(TOY)


def test_a_toy_section_reaches_summary_show_dashboard_and_diff(tmp_path, toy_registered):
    dirs = ("--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d")
    for name in ("before", "after"):
        code, out, err = run_cli("import", CPU, "--name", name, *dirs)
        assert code == 0, err
    (before,) = [p for p in (tmp_path / "t").iterdir() if "-before-" in p.name]
    summary = json.loads((before / "summary.json").read_text())
    keys = list(summary)
    # A new section's keys follow the built-in sections' keys, whatever those are.
    built_in = set(sections.SUMMARY_ORDER) | {
        k for section in sections.SECTIONS if section is not TOY for k in section.absent
    }
    assert keys.index("toy_ranges") > max(keys.index(k) for k in built_in if k in keys)
    assert summary["toy_ranges"]["ranges"] > 0

    code, out, err = run_cli("show", "before", *dirs)
    assert code == 0, err
    assert "toy: ranges per name" in out

    page = (tmp_path / "d" / f"{before.name}.html").read_text()
    assert "toy: ranges per name" in page

    code, out, err = run_cli("diff", "before", "after", "--json", *dirs)
    assert code in (0, 1), err
    names = [m["name"] for m in json.loads(out)["metrics"]]
    assert "toy_ranges.ranges" in names


def test_a_stored_toy_part_is_checked(tmp_path, toy_registered):
    """A section's checks apply to what it stored: a damaged part is refused in one line."""
    dirs = ("--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d")
    assert run_cli("import", CPU, "--name", "x", *dirs)[0] == 0
    (run,) = list((tmp_path / "t").iterdir())
    summary = json.loads((run / "summary.json").read_text())
    summary["toy_ranges"]["ranges"] = "many"
    (run / "summary.json").write_text(json.dumps(summary))
    code, out, err = run_cli("show", "x", *dirs)
    assert code == 2
    assert "toy_ranges.ranges is not an integer" in err


def test_without_the_toy_nothing_changes():
    assert TOY not in sections.SECTIONS
    assert "toy_ranges" not in api.summary_checks()
