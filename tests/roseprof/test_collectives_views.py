"""A multi-rank run as a user sees it: the per-rank and straggler tables of `show` at 80 columns, the arrival-spread
heatmap on the dashboard, one Chrome process per rank, and `diff` of two TP=2 runs per rank and overall."""

import gzip
import json

import numpy as np
import pytest

from roseprof.analysis.stragglers import per_step_lateness, spikes_by_rank
from tests.helpers import DATA, roseprof
from tests.roseprof.test_collectives import SLOW, TP2
from tests.roseprof.test_views_width import assert_fits


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("ranks")
    opts = ["--traces-dir", root / "traces", "--dashboards-dir", root / "dash"]
    for base, name in ((TP2, "even"), (SLOW, "slow")):
        proc = roseprof(
            "import", f"{base}.sqlite", "--steplog", f"{base}.steplog.jsonl", "--name", name, *opts
        )
        assert proc.returncode == 0, proc.stderr
    return root, opts


def test_show_names_the_straggler_at_80_columns(store):
    root, opts = store
    proc = roseprof("show", "slow", *opts, env={"COLUMNS": "80"})
    assert proc.returncode == 0, proc.stderr
    assert_fits(proc.stdout, 80)
    assert "collectives per rank" in proc.stdout
    assert "straggler: rank 1" in proc.stdout
    after = proc.stdout.split("straggler: rank 1", 1)[1].splitlines()[1:]  # the title's own line left out
    rows = [line.split() for line in after if line.strip() and not line.strip().startswith(("region", "─"))]
    assert rows[0][0] == "roseinfer.layer.mlp"  # the first row: the region with the most extra time


def test_dashboard_draws_the_arrival_heatmap(store):
    root, opts = store
    page = next((root / "dash").glob("*-slow-*.html")).read_text(encoding="utf-8")
    assert "Arrival spread per rank and decode step" in page
    assert "straggler: rank 1, host time in roseinfer.layer.mlp" in page


def test_dashboard_has_rank_lanes_and_a_rank_selector(store):
    """Each rank's decode steps as its own lane, and own time per region per rank with a selector (all ranks, or
    one rank alone) whose bars are the summary's per-rank region tables."""
    from roseprof.render.rank_figures import rank_regions, step_lanes

    root, _ = store
    page = next((root / "dash").glob("*-slow-*.html")).read_text(encoding="utf-8")
    assert "Decode step time per rank" in page and "Own time per region, per rank" in page
    run = next(p for p in (root / "traces").iterdir() if "-slow-" in p.name)
    summary = json.loads((run / "summary.json").read_text())
    steps = json.loads((run / "steps.json").read_text())
    lanes = step_lanes(steps)
    assert [t.name for t in lanes.data] == ["rank 0", "rank 1"]
    for trace in lanes.data:
        assert list(trace.y) == [d / 1e6 for d in steps["ranks"][trace.name]["dur_ns"]]
    fig = rank_regions(summary)
    labels = [b["label"] for b in fig.layout.updatemenus[0].buttons]
    assert labels == ["all ranks", "rank 0", "rank 1"]
    assert list(fig.layout.updatemenus[0].buttons[2]["args"][0]["visible"]) == [False, True]
    for trace, entry in zip(fig.data, summary["ranks"]):
        own = {r["name"]: r["self_ns"] / 1e6 for r in entry["regions"]}
        assert list(trace.x) == [own.get(name, 0) for name in trace.y]
    # The slowed rank's MLP own time is the larger (the injected sleep runs inside roseinfer.layer.mlp on rank 1).
    mlp = list(fig.data[0].y).index("roseinfer.layer.mlp")
    assert fig.data[1].x[mlp] > fig.data[0].x[mlp]


def test_chrome_export_has_one_process_per_rank(store, tmp_path):
    root, opts = store
    out = tmp_path / "slow.json.gz"
    proc = roseprof("export", "slow", "-o", out, *opts)
    assert proc.returncode == 0, proc.stderr
    events = json.loads(gzip.open(out, "rt").read())["traceEvents"]
    names = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    meta = {
        json.loads(line)["pid"]: json.loads(line)["rank"]
        for f in (f"{SLOW}.steplog.jsonl", f"{SLOW}.steplog.rank1.jsonl")
        for line in open(f).readlines()[:1]
    }
    for pid, rank in meta.items():
        assert names[pid] == f"rank {rank} (pid {pid})"
    # Every region slice sits on one of the two ranks' processes.
    regions = {e["pid"] for e in events if e.get("cat") == "user_annotation"}
    assert regions == set(meta)


def test_diff_compares_per_rank_and_overall(store):
    root, opts = store
    proc = roseprof("diff", "even", "slow", "--json", *opts)
    assert proc.returncode == 0, proc.stderr
    metrics = {m["name"]: m for m in json.loads(proc.stdout)["metrics"]}
    for rank in (0, 1):
        assert f"ranks.rank{rank}.step_p50_ns" in metrics  # the ranks section's
        assert f"rank {rank}.exposed_ms" in metrics
    spread = metrics["arrival_spread_p50_ms"]
    assert spread["b"] > spread["a"]  # rank 1's 3 ms sleep before every MLP all-reduce


def test_spike_join_names_the_late_rank():
    """The slow capture holds no ITL spike by the spike section's definition (its steps are all slow alike), so
    the join is checked on its real tokens and lateness with one step's tokens marked as a spike: the step where
    rank 1 was latest is explained by rank 1; a step where every rank arrived together is not."""
    from tests.roseprof.test_collectives import tp_instances

    trace, inst, parts, m = tp_instances(SLOW)
    steps, late = per_step_lateness(m, len(parts.label))
    worst = int(steps[np.argmax(late[1])])
    from roseprof.workload.steplog import read_steplog

    log = read_steplog(f"{SLOW}.steplog.jsonl")
    series = []
    for r in log.requests:
        t, st = r["token_ns"], r["token_step"][1:]
        itl = [(b - a) / 1e6 for a, b in zip(t, t[1:])]
        series.append(
            {"step": st, "itl_ms": itl, "spike_cause": ["slow_step" if s == worst else None for s in st]}
        )
    median = float(np.median([x for s in series for x in s["itl_ms"]]))
    out = spikes_by_rank(series, {"median_ms": median}, parts, m)
    assert out["spike_steps"] == 1 and out["explained_steps"] == 1
    assert out["listed"][0]["step"] == worst and out["listed"][0]["rank"] == 1
    assert out["listed"][0]["late_ms"] == pytest.approx(late[1, np.argmax(late[1])] / 1e6)


def test_one_process_gpu_run_keeps_its_views(tmp_path):
    """A run of one process with no collective: no collectives panel, no heatmap, process tracks as before."""
    opts = ["--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d"]
    f = DATA / "nsys" / "h100-nsys2025.3-roseinfer-graphs.sqlite"
    assert roseprof("import", f, "--name", "one", *opts).returncode == 0
    proc = roseprof("show", "one", *opts, env={"COLUMNS": "80"})
    assert "collectives per rank" not in proc.stdout
    page = next((tmp_path / "d").glob("*.html")).read_text(encoding="utf-8")
    assert "Arrival spread per rank" not in page


def test_a_damaged_collectives_part_is_refused_in_one_line(store, tmp_path):
    """The section's checks apply to what it stored: a hand-edited `collectives` is named, never a traceback.
    (In process, as test_add_section checks a toy's part: a fresh `roseprof show` registers the sections' checks
    once the `shape` branch's CLI hands them over before any verb reads a run.)"""
    import shutil

    from tests.helpers import one_line_error, run_cli

    root, _ = store
    run = next(p for p in (root / "traces").iterdir() if "-slow-" in p.name)
    copy = tmp_path / "traces" / run.name
    shutil.copytree(run, copy)
    summary = json.loads((copy / "summary.json").read_text())
    summary["collectives"]["ranks"][1]["last_count"] = "many"
    (copy / "summary.json").write_text(json.dumps(summary))
    code, out, err = run_cli(
        "show", run.name, "--traces-dir", tmp_path / "traces", "--dashboards-dir", tmp_path / "d"
    )
    one_line_error(code, out, err)
    assert "collectives.ranks[1].last_count is not an integer" in err
