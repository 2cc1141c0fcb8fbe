"""The first real NCCL captures (TP=2 on 2 H200s, tests/data/README.md): per rank, what roseprof says equals what the
files hold, counted straight from them (SQL over nsys' export; each Kineto file's own JSON), and the three things
these files showed wrong: the clock check pairing different steps' collectives, NCCL's own NVTX range named as the
region a collective was issued from, and NCCL's range spelled two ways."""

from __future__ import annotations

import gzip
import io
import json
import re
import sqlite3
from collections import Counter

import pytest
from rich.console import Console

from roseprof import api
from roseprof.export.chrome import ChromeExport
from roseprof.render.terminal import TerminalRenderer
from roseprof.run import tables
from roseprof.run.store import RunStore
from tests.helpers import DATA, packed

NSYS = DATA / "nsys" / "h200x2-nsys2025.3-roseinfer-tp2"
TORCH = DATA / "torch" / "h200x2-torch2.11-roseinfer-tp2"
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f16_RING_LL"
PROGRAM_SITES = {"roseinfer.layer.attention", "roseinfer.layer.mlp"}  # the engine's all-reduces: 2 per layer


def _log(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _logs(first) -> dict[int, list[dict]]:
    """Each rank's step log records, by the rank its meta record says."""
    out = {}
    for path in (first, first.with_name(first.name.replace(".jsonl", ".rank1.jsonl"))):
        records = _log(path)
        out[records[0]["rank"]] = records
    return out


@pytest.fixture(scope="module")
def nsys_run(tmp_path_factory):
    store = RunStore(tmp_path_factory.mktemp("nsys") / "traces")
    return api.import_path(store, packed(f"{NSYS}.sqlite"), None, f"{NSYS}.steplog.jsonl")


@pytest.fixture(scope="module")
def torch_run(tmp_path_factory):
    store = RunStore(tmp_path_factory.mktemp("torch") / "traces")
    return api.import_path(store, str(TORCH), None, str(TORCH / "steplog.jsonl"))


def _sql_kernels() -> dict[int, tuple[int, int, int]]:
    """{pid: (kernels, their ns, NCCL kernels)} straight from nsys' export."""
    db = sqlite3.connect(packed(f"{NSYS}.sqlite"))
    rows = db.execute(
        "SELECT (k.globalPid >> 24) & 16777215, count(*), sum(k.end - k.start), sum(s.value LIKE 'ncclDevKernel%') "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName GROUP BY 1"
    ).fetchall()
    db.close()
    return {pid: (n, ns, nccl) for pid, n, ns, nccl in rows}


def _kineto_kernels(path) -> tuple[int, int, int]:
    """(kernels, their ns, NCCL kernels) in one Kineto file, counted straight from its JSON (`dur`: µs, ns decimals)."""
    with gzip.open(path, "rt") as fh:
        events = [e for e in json.load(fh)["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "kernel"]
    ns = sum(round(e["dur"] * 1000) for e in events)
    return len(events), ns, sum(e["name"].startswith("ncclDevKernel") for e in events)


def _check_ranks(summary: dict, logs: dict[int, list[dict]]) -> None:
    """Ranks named by the step logs (pid, rank), and the conservation line per rank adding up to the all-ranks line."""
    entries = summary["ranks"]
    assert [(e["rank"], e["pid"], e["rank_from"]) for e in entries] == [
        (r, logs[r][0]["pid"], "step log") for r in (0, 1)
    ]
    line = summary["kernel_attribution"]
    assert sum(e["kernel_ns"] for e in entries) == line["kernel_ns"]
    assert sum(e["kernel_in_regions_ns"] for e in entries) == line["attributed_ns"]
    coll = summary["collectives"]
    assert coll["kind"] == "gpu" and coll["rank_known"] and [e["rank"] for e in coll["ranks"]] == [0, 1]


def test_nsys_per_rank_kernels_collectives_and_steps_are_the_files(nsys_run):
    summary, logs = nsys_run.summary(), _logs(NSYS.with_name(NSYS.name + ".steplog.jsonl"))
    _check_ranks(summary, logs)
    sql = _sql_kernels()
    for entry in summary["ranks"]:
        n, ns, nccl = sql[entry["pid"]]
        assert (entry["kernel_count"], entry["kernel_ns"]) == (n, ns)
        coll = next(e for e in summary["collectives"]["ranks"] if e["rank"] == entry["rank"])
        assert coll["count"] == nccl == 672
        assert entry["steps"]["count"] == sum(r["type"] == "step" for r in logs[entry["rank"]]) == 24
    assert summary["collectives"]["count"] == sum(v[2] for v in sql.values())
    assert {k["name"].split("(")[0] for k in summary["kernels"] if "nccl" in k["name"].lower()} == {
        NCCL_KERNEL
    }


def test_torch_per_rank_kernels_collectives_and_steps_are_each_files(torch_run):
    summary, logs = torch_run.summary(), _logs(TORCH / "steplog.jsonl")
    _check_ranks(summary, logs)
    steps = tables.read_steps(torch_run.path)["ranks"]
    for entry in summary["ranks"]:
        kernels, ns, nccl = _kineto_kernels(TORCH / f"rank-{entry['rank']}.trace.json.gz")
        assert (entry["kernel_count"], entry["kernel_ns"]) == (kernels, ns)
        coll = next(e for e in summary["collectives"]["ranks"] if e["rank"] == entry["rank"])
        assert coll["count"] == nccl
        # The profiler's window: the rank's steps are those of its log the window held, by the engine's numbers.
        logged = {r["index"] for r in logs[entry["rank"]] if r["type"] == "step"}
        mine = steps[entry["label"]]["index"]
        assert entry["steps"]["count"] == len(mine) == 14 and set(mine) <= logged
    assert [e["count"] for e in summary["collectives"]["ranks"]] == [
        312,
        335,
    ]  # the windows differ by ~a step


@pytest.mark.parametrize("which", ["nsys_run", "torch_run"])
def test_the_clock_check_pairs_the_collectives_the_arrival_spread_pairs(which, request):
    """One host, one clock: the ends of one all-reduce agree to microseconds on both ranks. Pairing the k-th
    collective of each rank by order (the torch windows start a step apart) put another step's all-reduce beside
    it: 507 µs p50, 1,133 µs at most."""
    summary = request.getfixturevalue(which).summary()
    clock = summary["rank_clock"]["collectives"]
    assert clock["end_spread_max_ns"] < 10_000
    assert clock["matched"] == summary["collectives"]["matched"] > 0
    assert clock["matched_by"] == "step" and clock["ranks"] == 2
    # Where each rank has its own clock (Kineto), the arrival spread's note says how far apart they can be.
    (note,) = [
        p["note"] for p in api.section_panels(summary) if p["title"].startswith("collectives per rank")
    ]
    assert ("µs at most by the collectives' ends" in note) == (which == "torch_run")


def test_a_collective_is_issued_from_the_programs_region_not_nccls_own_range(nsys_run):
    c = nsys_run.summary()["collectives"]
    assert {r["region"]: r["count"] for r in c["by_region"]} == {s: 672 for s in PROGRAM_SITES}
    assert {r["region"] for r in c["by_order"]} == PROGRAM_SITES
    assert c["straggler"]["most_late_site"] in PROGRAM_SITES


def test_nccls_range_is_spelled_one_way_in_every_table(nsys_run, tmp_path):
    summary = nsys_run.summary()
    spelled = "NCCL:ncclAllReduce"
    assert any(r["name"] == "ncclAllReduce" and r["domain"] == "NCCL" for r in summary["regions"])
    assert spelled in {r["name"] for r in summary["steady"]["regions"]}
    # The region each NCCL kernel ran for: its capture-time one (the decode step is a CUDA graph), else its launching.
    ran_for = {
        k["capture_region"] or k["region"] for k in summary["kernels"] if k["name"].startswith(NCCL_KERNEL)
    }
    assert ran_for == {spelled}
    out = io.StringIO()
    TerminalRenderer(Console(file=out, width=200, color_system=None)).render(api.run_view(nsys_run))
    text = out.getvalue()
    assert text.count(spelled) >= 3  # steady state, whole run, top kernels
    assert not re.search(r"(?<!NCCL:)\bncclAllReduce\b", text)
    # The export's slices too (its kernels' `region` argument was already spelled so).
    view = api.run_view(nsys_run)
    events = json.loads(ChromeExport().render(view, tmp_path / "run.json").read_text())["traceEvents"]
    slices = Counter(
        e["name"] for e in events if e.get("cat") == "user_annotation" and "ncclAllReduce" in e["name"]
    )
    assert slices == {
        spelled: 336
    }  # 168 a rank: one per all-reduce call while the graphs were captured, and prefill


def test_a_kernel_launched_before_the_window_is_in_no_step(torch_run):
    """Rank 1's profiler window opened while 23 all-reduces of the step before it still ran: the file has no call
    that launched them. Placed by their GPU start, 5 fell into the window's first step (29 there against rank 0's
    24) and that step was left out of the arrival spread; in no step, every step of the window matches."""
    summary = torch_run.summary()
    c = summary["collectives"]
    assert c["unmatched_steps"] == 0 and c["matched"] == 312 == 24 * c["matched_steps"]
    assert not any("different numbers of collectives" in w for w in summary["warnings"])


def test_diff_names_nccls_range_as_the_tables_do(nsys_run, tmp_path):
    """Two imports of the nsys capture: the diff's region metrics spell NCCL's range as every table does, and
    its per-step figures come from the step rows (which name it so too)."""
    store = RunStore(tmp_path / "traces")
    for name in ("a", "b"):
        api.import_path(store, packed(f"{NSYS}.sqlite"), name, f"{NSYS}.steplog.jsonl")
    metrics = {m["name"]: m for m in api.diff_runs(store, ["a"], ["b"], None, None, False).result["metrics"]}
    assert {"regions.NCCL:ncclAllReduce.total_ns", "regions.NCCL:ncclAllReduce.self_ns"} <= set(metrics)
    assert not [n for n in metrics if n.startswith("regions.ncclAllReduce")]


@pytest.mark.parametrize("which", ["nsys_run", "torch_run"])
def test_show_fits_80_columns_with_every_rank_panel(which, request):
    run = request.getfixturevalue(which)
    out = io.StringIO()
    TerminalRenderer(Console(file=out, width=80, color_system=None)).render(api.run_view(run))
    lines = out.getvalue().splitlines()
    assert all(len(line) <= 80 for line in lines if not line.startswith(("run folder:", "imported from:")))
    titles = ("ranks:", "collectives per rank", "collectives by the region", "arrival spread by collective")
    assert all(any(line.startswith(t) for line in lines) for t in titles)


@pytest.mark.parametrize("which", ["nsys_run", "torch_run"])
def test_two_ranks_in_step_have_no_clear_straggler(which, request):
    """Two GPUs running the same schedule: neither rank is a straggler. In the torch capture rank 0 holds most of
    the lateness through a few collectives it reached late by a lot, while it is last at a minority of them (the
    spread's p50 is under a microsecond): that is not a slow rank, and it is not called a clear one."""
    s = request.getfixturevalue(which).summary()["collectives"]["straggler"]
    assert s is not None and not s["clear"]
    assert s["last_pct"] < 75
