"""Every rank's GPU work, truth-checked on real four-GPU captures (issue 41; tests/data/README.md, 4 H200s, NCCL):
per rank, what roseprof says equals what the files hold (SQL over nsys' export; each Kineto file's own JSON); a
rank made late on purpose is named with the host region its GPU idled in; and each rank's GPU step splits into
compute, exposed communication and idle time, which `show` and `diff` print."""

from __future__ import annotations

import sqlite3

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roseprof import api
from roseprof.analysis.gpu_time import union_by_group
from roseprof.run.store import RunStore
from tests.helpers import DATA, packed, roseprof, unpacked
from tests.roseprof.test_collectives_nccl import _kineto_kernels

NSYS = DATA / "nsys" / "h200x4-nsys2025.3-roseinfer-tp4"
SLOW = DATA / "nsys" / "h200x4-nsys2025.3-roseinfer-tp4-slowrank2"
TORCH = DATA / "torch" / "h200x4-torch2.11-roseinfer-tp4"
TP2 = DATA / "nsys" / "h200x2-nsys2025.3-roseinfer-tp2"
RANKS = [0, 1, 2, 3]


def _imported(base, folder) -> tuple[str, object]:
    """(the unpacked SQLite export, its run) of a compressed capture with its step logs."""
    db = unpacked(f"{base}.sqlite.xz", folder)
    return db, api.import_path(RunStore(folder / "traces"), db, None, db.replace(".sqlite", ".steplog.jsonl"))


@pytest.fixture(scope="module")
def tp4(tmp_path_factory):
    return _imported(NSYS, tmp_path_factory.mktemp("tp4"))


@pytest.fixture(scope="module")
def slow(tmp_path_factory):
    return _imported(SLOW, tmp_path_factory.mktemp("slow"))


def _sql_per_pid(db: str) -> dict[int, tuple[int, int]]:
    """{pid: (kernels, NCCL kernels)} straight from nsys' export."""
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT (k.globalPid >> 24) & 16777215, count(*), sum(s.value LIKE 'ncclDevKernel%') "
        "FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName GROUP BY 1"
    ).fetchall()
    con.close()
    return {pid: (n, nccl) for pid, n, nccl in rows}


def _sql_ranges_per_pid(db: str) -> dict[int, int]:
    """{pid: NVTX push/pop and start/end ranges} from nsys' export."""
    con = sqlite3.connect(db)
    rows = con.execute(
        "SELECT (globalTid >> 24) & 16777215, count(*) FROM NVTX_EVENTS WHERE eventType IN (59, 60) "
        "AND end IS NOT NULL GROUP BY 1"
    ).fetchall()
    con.close()
    return dict(rows)


@pytest.mark.parametrize("which", ["tp4", "slow"])
def test_every_rank_has_its_kernels_ranges_and_collectives(which, request):
    db, run = request.getfixturevalue(which)
    summary = run.summary()
    kernels, ranges = _sql_per_pid(db), _sql_ranges_per_pid(db)
    assert [e["rank"] for e in summary["ranks"]] == RANKS
    for entry in summary["ranks"]:
        n, nccl = kernels[entry["pid"]]
        assert entry["kernel_count"] == n > 0
        assert entry["range_count"] == ranges[entry["pid"]]
        coll = next(e for e in summary["collectives"]["ranks"] if e["rank"] == entry["rank"])
        assert coll["count"] == nccl > 0
    # The spawned ranks kept every kernel: each has rank 0's count (the same program on every rank).
    assert len({e["kernel_count"] for e in summary["ranks"]}) == 1
    assert summary["collectives"]["unmatched_steps"] == 0


def test_torch_every_rank_is_its_own_file(tmp_path):
    """roseprof torch of the same command as the nsys capture: one Kineto file per rank, each rank's kernels and
    collectives the file's own (the profiler's window is each rank's: counts differ by about a step)."""
    run = api.import_path(RunStore(tmp_path / "traces"), str(TORCH), None, str(TORCH / "steplog.jsonl"))
    summary = run.summary()
    assert [e["rank"] for e in summary["ranks"]] == RANKS
    for entry in summary["ranks"]:
        kernels, _, nccl = _kineto_kernels(TORCH / f"rank-{entry['rank']}.trace.json.gz")
        assert entry["kernel_count"] == kernels > 0
        coll = next(e for e in summary["collectives"]["ranks"] if e["rank"] == entry["rank"])
        assert coll["count"] == nccl > 0
        assert entry["steps"]["count"] == 14


def test_the_late_rank_is_named_with_the_host_region_its_gpu_idled_in(slow):
    s = slow[1].summary()["collectives"]["straggler"]
    assert (s["rank"], s["clear"]) == (2, True)
    assert (s["region"], s["region_kind"]) == ("roseinfer.layer.mlp", "GPU idle")
    assert s["where"] == "the GPU idled while the host was in roseinfer.layer.mlp"
    # The planted 1 ms sleep: each late collective's extra time in the region is about that.
    top = s["regions"][0]
    assert 0.7e6 <= top["extra_p50_ns"] <= 1.3e6


def test_a_rank_that_is_not_late_is_not_blamed(tp4):
    s = tp4[1].summary()["collectives"]["straggler"]
    assert s is None or not s["clear"]


def test_gpu_time_splits_each_ranks_step(tp4):
    g = tp4[1].summary()["gpu_time"]
    assert [e["rank"] for e in g["ranks"]] == RANKS
    for e in g["ranks"]:
        assert e["compute_p50_ns"] > 0 and e["exposed_p50_ns"] > 0  # NCCL's all-reduces, nothing beside them
        assert e["busy_p50_ns"] <= e["period_p50_ns"]
        parts = e["compute_p50_ns"] + e["exposed_p50_ns"] + e["outside_p50_ns"] + e["idle_p50_ns"]
        assert abs(parts - e["period_p50_ns"]) <= 0.15 * e["period_p50_ns"]  # medians of parts, not of sums


def test_one_gpu_has_no_exposed_communication(tmp_path):
    base = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode"
    run = api.import_path(RunStore(tmp_path / "traces"), f"{base}.sqlite", None, f"{base}.steplog.jsonl")
    (only,) = run.summary()["gpu_time"]["ranks"]
    assert only["exposed_p50_ns"] == 0 and only["compute_p50_ns"] > 0


def test_show_and_diff_say_where_each_ranks_step_went(tp4, tmp_path):
    db, run = tp4
    traces = tmp_path / "traces"
    opts = ["--traces-dir", traces, "--dashboards-dir", tmp_path / "dash"]
    for path, name, log in (
        (packed(f"{TP2}.sqlite"), "tp2", f"{TP2}.steplog.jsonl"),
        (db, "tp4", db.replace(".sqlite", ".steplog.jsonl")),
    ):
        proc = roseprof("import", path, "--name", name, "--steplog", log, *opts, env={"COLUMNS": "80"})
        assert proc.returncode == 0, proc.stderr
    show = roseprof("show", "tp4", *opts, env={"COLUMNS": "80"})
    assert "GPU time per decode step, per rank (ms, p50)" in show.stdout
    assert "communication with no" in show.stdout
    diff = roseprof("diff", "tp2", "tp4", *opts, env={"COLUMNS": "80"})
    assert diff.returncode == 0, diff.stderr
    assert "GPU time per step (ms, p50, before→after)" in diff.stdout
    assert "rank 0's GPU step" in diff.stdout and "exposed comm" in diff.stdout
    block = diff.stdout.split("GPU time per step")[1].split("all metrics")[0]
    assert max(len(line) for line in block.splitlines()) <= 80
    assert block.index("rank 0") < block.index("rank 1")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1000), st.integers(0, 50)), max_size=40))
def test_union_by_group_is_the_covered_time(intervals):
    """The union of each group's intervals, against counting every covered nanosecond."""
    group = np.array([g for g, _, _ in intervals], dtype=np.int64)
    start = np.array([s for _, s, _ in intervals], dtype=np.int64)
    end = start + np.array([d for _, _, d in intervals], dtype=np.int64)
    expected = [len({t for g, s, d in intervals if g == k for t in range(s, s + d)}) for k in range(4)]
    assert union_by_group(group, start, end, 4).tolist() == expected
