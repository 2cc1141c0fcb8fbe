"""`roseprof diff`: resolve two runs, compare them, gate, and render the diff dashboard."""

from __future__ import annotations

from roseprof.analysis.diff import METHOD, compare, gate, kernel_changes, load, rank
from roseprof.errors import RoseprofError
from roseprof.store import Run, RunStore


def _check(run: Run, allow_incomplete: bool) -> None:
    status = run.manifest.get("status")
    if status != "complete" and not allow_incomplete:
        raise RoseprofError(f"run {run.id} is {status}: compare what it has with --allow-incomplete")
    if not (run.path / "summary.json").is_file():
        raise RoseprofError(f"run {run.id} is {status} and has no summary.json: nothing to compare")


def _describe(run: Run) -> dict:
    m = run.manifest
    return {
        "id": run.id,
        "name": m.get("name"),
        "tool": m.get("tool"),
        "status": m.get("status"),
        "command": m.get("command"),
    }


def diff_runs(
    store: RunStore, ref_a: str, ref_b: str, threshold, patterns, allow_incomplete: bool, dashboards_dir
) -> dict:
    run_a, run_b = store.resolve(ref_a), store.resolve(ref_b)
    for run in (run_a, run_b):
        _check(run, allow_incomplete)
    a, b = load(run_a), load(run_b)
    metrics = compare(a, b)
    if not metrics:
        raise RoseprofError(
            f"runs {run_a.id} and {run_b.id} have nothing in common to compare (no shared regions, kernels or steps)"
        )
    regressions = gate(metrics, threshold, patterns)
    result = {
        "a": _describe(run_a),
        "b": _describe(run_b),
        "method": METHOD,
        "metrics": rank(metrics),
        "kernels": kernel_changes(a, b),
        "regressions": [m["name"] for m in regressions],
        "threshold_pct": threshold,
    }
    from roseprof.dashboard.diff_html import render_diff

    result["dashboard"] = str(render_diff(a, b, result, dashboards_dir))
    return result
