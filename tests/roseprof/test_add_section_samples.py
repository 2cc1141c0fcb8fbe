"""A section whose diff metric has per-step samples behind it (the "add an analysis" recipe, docs/ARCHITECTURE.md):
`diff_prepare` makes its own per-step column of each stored run, a `diff_samples` family compares it with the
diff's bootstrap, and `roseprof diff` shows the metric with an interval, with no file but the section touched."""

import json

import numpy as np
import pytest

from roseprof.analysis import sections
from roseprof.analysis.diff_metric import Sample, Sides
from roseprof.analysis.sections import Context, Section, SectionResult
from tests.helpers import DATA, run_cli

GPU = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.sqlite"
GPU_LOG = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.steplog.jsonl"


# --- what a new analysis module holds -------------------------------------------------------------------------
def compute(ctx: Context) -> SectionResult:
    return SectionResult({"toy_launches": {"ranges": len(ctx.trace.ranges.start)}})


def diff_prepare(summary, steps, itl_rows, trace) -> np.ndarray | None:
    """[S] how many ranges start inside each decode step."""
    if not steps or not steps.get("rows"):
        return None
    starts = np.asarray(steps["rows"]["start_ns"], dtype=np.int64)  # [S]
    ends = starts + np.asarray(steps["rows"]["dur_ns"], dtype=np.int64)
    owner = np.searchsorted(starts, trace.ranges.start, side="right") - 1  # [R] the step a range starts in
    inside = (owner >= 0) & (trace.ranges.start < ends[np.maximum(owner, 0)])
    return np.bincount(owner[inside], minlength=len(starts)).astype(np.float64)


def ranges_per_step(sides: Sides) -> list[dict]:
    if any(r.sections.get("toy_launches") is None for r in sides.runs):
        return []
    a = Sample([r.sections["toy_launches"] for r in sides.before])
    b = Sample([r.sections["toy_launches"] for r in sides.after])
    return [sides.metric("toy_launches.ranges_per_step", a, b, np.mean)]


TOY = Section(
    "toy_launches",
    compute,
    checks={"toy_launches": ({"ranges": int}, None)},
    diff_samples={"toy_launches": ranges_per_step},
    diff_prepare=diff_prepare,
)
# ---------------------------------------------------------------------------------------------------------------


@pytest.fixture
def toy_registered():
    """The recipe's registration line (an entry in SECTIONS), undone after."""
    sections.SECTIONS.append(TOY)
    yield
    sections.SECTIONS.remove(TOY)


def test_a_sections_own_per_step_samples_reach_diff_with_an_interval(tmp_path, toy_registered):
    dirs = ("--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d")
    for name in ("before", "after"):
        code, out, err = run_cli("import", GPU, "--steplog", GPU_LOG, "--name", name, *dirs)
        assert code == 0, err
    code, out, err = run_cli("diff", "before", "after", "--json", *dirs)
    assert code in (0, 1), err
    metrics = {m["name"]: m for m in json.loads(out)["metrics"]}
    toy = metrics["toy_launches.ranges_per_step"]
    steps = metrics["steps.mean_ns"]
    # One value per decode step, resampled like the step times: an interval, not a plain figure.
    assert toy["n_a"] == steps["n_a"] > 5
    assert toy["a"] == toy["b"] > 0
    assert toy["ci_low_pct"] is not None and toy["ci_low_pct"] <= 0 <= toy["ci_high_pct"]


def test_without_the_toy_runs_carry_no_section_samples(tmp_path):
    from roseprof import api
    from roseprof.run.store import RunStore

    store = RunStore(tmp_path / "t")
    run = api.import_path(store, str(GPU), "x", str(GPU_LOG))
    assert TOY not in sections.SECTIONS
    assert "toy_launches" not in api.summary_checks()
    assert api.load_run(run).sections == {}
