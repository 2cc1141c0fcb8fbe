"""Collectives, arrival spread and the straggler, on real captures: the TP=2 CPU engine runs (gloo; one with rank 1
made late on purpose) checked against direct SQL over nsys' own export, and the GPU path on real H100 kernels."""

import sqlite3

import numpy as np
import pytest

from roseprof.analysis.collectives import find_instances, is_collective_kernel, match
from roseprof.analysis.ranks import assign_ranks
from roseprof.analysis.sections import SECTIONS, Context
from roseprof.analysis.sections.collectives import run_participants
from roseprof.analysis.summary import analyse
from roseprof.drivers.nsys.reader import read_nsys_sqlite
from roseprof.model import KERNEL
from roseprof.workload.steplog import read_steplog
from tests.helpers import DATA

TP2 = DATA / "nsys" / "cpu-nsys2022.4-roseinfer-tp2"
SLOW = DATA / "nsys" / "cpu-nsys2022.4-roseinfer-tp2-slowrank1"
GRAPHS = DATA / "nsys" / "h100-nsys2025.3-roseinfer-graphs.sqlite"
PID = "(e.globalTid >> 24) & 16777215"
NAMED = "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId WHERE coalesce(e.text, s.value) = ?"


def tp_trace(base):
    """The capture as the reader gives it, and its analysis with both ranks' step logs (which name the ranks)."""
    trace = read_nsys_sqlite(f"{base}.sqlite", label=base.name)
    log0, log1 = read_steplog(f"{base}.steplog.jsonl"), read_steplog(f"{base}.steplog.rank1.jsonl")
    summary, _ = analyse(trace, log0, rank_logs={1: log1})
    return trace, summary


def instances(trace, log0=None, log1=None, is_collective=is_collective_kernel):
    """(Instances, Participants, Matched) as the section finds them, after the sections it reads (steps, ranks)."""
    logs = {r: log for r, log in ((0, log0), (1, log1)) if log is not None}
    assign_ranks(trace, logs)
    ctx = Context(trace, log0, logs=logs)
    for section in SECTIONS[: [s.name for s in SECTIONS].index("collectives")]:
        if section.applies(trace):
            ctx.results[section.name] = section.compute(ctx)
    parts, op_group, range_group = run_participants(ctx)
    inst = find_instances(
        trace,
        ctx.tree,
        ctx.gpu.op_range,
        ctx.capture,
        op_group,
        range_group,
        parts,
        ctx.kernel_keys.names,
        is_collective,
    )
    return inst, parts, match(inst, len(parts.label))


def tp_instances(base):
    trace = read_nsys_sqlite(f"{base}.sqlite", label=base.name)
    logs = read_steplog(f"{base}.steplog.jsonl"), read_steplog(f"{base}.steplog.rank1.jsonl")
    return (trace, *instances(trace, *logs))


@pytest.fixture(scope="module")
def tp2():
    return tp_trace(TP2)


@pytest.fixture(scope="module")
def slow():
    return tp_trace(SLOW)


def sql_arrivals(base) -> dict[int, dict[int, list[int]]]:
    """pid -> {k: starts of the all-reduce ranges inside that process' k-th decode step}, straight from SQL."""
    db = sqlite3.connect(f"{base}.sqlite")
    out: dict[int, dict[int, list[int]]] = {}
    steps = db.execute(
        f"SELECT {PID}, e.start, e.end {NAMED} ORDER BY 1, 2", ("roseinfer.decode_step",)
    ).fetchall()
    per_pid: dict[int, list[tuple[int, int]]] = {}
    for pid, s, e in steps:
        per_pid.setdefault(pid, []).append((s, e))
    for pid, start in db.execute(
        f"SELECT {PID}, e.start {NAMED} ORDER BY 1, 2", ("roseinfer.layer.allreduce",)
    ):
        for k, (s, e) in enumerate(per_pid[pid]):
            if s <= start <= e:
                out.setdefault(pid, {}).setdefault(k, []).append(start)
    return out


@pytest.mark.parametrize("base", [TP2, SLOW], ids=["tp2", "slowrank1"])
def test_per_rank_counts_equal_sql(base, request):
    trace, summary = request.getfixturevalue("tp2" if base is TP2 else "slow")
    db = sqlite3.connect(f"{base}.sqlite")
    counts = dict(db.execute(f"SELECT {PID}, count(*) {NAMED} GROUP BY 1", ("roseinfer.layer.allreduce",)))
    c = summary["collectives"]
    assert c["kind"] == "cpu" and c["rank_known"]
    assert {e["pid"]: e["count"] for e in c["ranks"]} == counts
    assert [e["rank"] for e in c["ranks"]] == [0, 1]
    # 63 decode steps, 4 layers x 2 all-reduces each: 504 inside the steps, the prefill's 8 outside.
    assert [e["in_steps"] for e in c["ranks"]] == [504, 504]
    assert c["matched"] == 504 and c["matched_steps"] == 63 and c["unmatched_steps"] == 0


@pytest.mark.parametrize("base", [TP2, SLOW], ids=["tp2", "slowrank1"])
def test_arrival_spread_equals_sql_and_is_conserved(base):
    trace, inst, parts, m = tp_instances(base)
    assert parts.rank == [0, 1] and parts.label == ["rank 0", "rank 1"]
    sql = sql_arrivals(base)
    for j in range(len(m.step)):
        arrivals = [sql[pid][int(m.step[j])][int(m.order[j])] for pid in parts.pid]
        assert m.arrival[j].tolist() == arrivals
        assert m.spread[j] == max(arrivals) - min(arrivals)
    assert (m.spread >= 0).all() and (m.lateness >= 0).all()
    # The last rank's arrival is the latest; the first rank's lateness is 0.
    assert (m.arrival[np.arange(len(m.step)), m.last] == m.arrival.max(axis=1)).all()
    assert (m.lateness.min(axis=1) == 0).all()
    assert (m.spread == m.lateness.max(axis=1)).all()


def test_straggler_is_rank_1_in_the_mlp(slow):
    _, summary = slow
    s = summary["collectives"]["straggler"]
    assert s["rank"] == 1
    assert s["region"] == "roseinfer.layer.mlp"
    assert s["most_late_site"] == "roseinfer.layer.mlp"
    # The injected sleep is 3 ms per MLP on rank 1: it is late by about that at the MLP's all-reduce.
    assert s["last_pct"] > 50 and s["late_share_pct"] > 80
    assert s["regions"][0]["extra_p50_ns"] >= 2.5e6
    ranks = {e["rank"]: e for e in summary["collectives"]["ranks"]}
    assert ranks[1]["last_count"] > ranks[0]["last_count"]
    # Rank 0 waits for rank 1: it spends more of each step inside the all-reduce.
    assert ranks[0]["exposed_per_step_p50_ns"] > ranks[1]["exposed_per_step_p50_ns"]


def test_heatmap_is_each_ranks_lateness_per_step(slow):
    trace, summary = slow
    c = summary["collectives"]
    h = c["heatmap"]
    assert h["ranks"] == [0, 1] and len(h["steps"]) == c["matched_steps"]
    late = np.asarray(h["late_ms"])  # [P, S]
    assert late.shape == (2, len(h["steps"])) and (late >= 0).all()
    assert late[1].sum() > late[0].sum()


def test_gpu_path_on_real_h100_kernels():
    """No capture of NCCL kernels exists here (no 2-GPU machine was lent): the GPU path is checked on a real
    graph-replayed kernel standing in for a collective (`paged_decode_kernel`): its count per process, its exposed
    time (the part no other kernel on its GPU overlaps, computed by brute force from SQL) and its region (the
    capture-time region of a replayed kernel)."""
    trace = read_nsys_sqlite(str(GRAPHS), label=GRAPHS.name)
    inst, parts, m = instances(trace, is_collective=lambda name: name.startswith("paged_decode_kernel"))
    db = sqlite3.connect(GRAPHS)
    rows = db.execute(
        "SELECT k.start, k.end, k.deviceId, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k "
        "JOIN StringIds s ON s.id = k.demangledName ORDER BY k.start"
    ).fetchall()
    mine = [(s, e, d) for s, e, d, n in rows if n.startswith("paged_decode_kernel")]
    others = [(s, e, d) for s, e, d, n in rows if not n.startswith("paged_decode_kernel")]
    assert inst.kind == "gpu" and len(inst.arrival) == len(mine) == 948
    assert sorted(inst.arrival.tolist()) == [s for s, _, _ in mine]
    exposed = {}
    for s, e, d in mine:
        covered = np.zeros(e - s, dtype=bool)
        for os_, oe, od in others:
            if od == d and os_ < e and oe > s:
                covered[max(os_, s) - s : min(oe, e) - s] = True
        exposed[s] = int((~covered).sum())
    assert {a: x for a, x in zip(inst.arrival.tolist(), inst.exposed.tolist())} == exposed
    sites = {trace.names[i] for i in inst.site.tolist() if i >= 0}
    assert sites == {"roseinfer.layer.attention"}
    assert len(parts.label) == 1 and not m.spread.any()  # one process: no spread, no straggler
    # Graph replays belong to the decode step whose range launched the graph: every step has its 12 layers'.
    assert (np.bincount(inst.step[inst.step >= 0]) == 12).all()


def test_single_process_run_has_no_spread():
    trace = read_nsys_sqlite(str(GRAPHS), label=GRAPHS.name)
    summary, _ = analyse(trace, None)
    assert summary["collectives"] is None  # no NCCL kernel and no all-reduce region


def test_gpu_windows_split_by_the_region_each_kernel_ran_for():
    """A GPU straggler's extra time is found in the kernels between its collectives, by the region each ran for:
    over the whole H100 graph run, that split equals the kernels section's per-region totals."""
    from roseprof.analysis.sections.collectives import _op_owner
    from roseprof.analysis.stragglers import gpu_segments, own_time

    trace = read_nsys_sqlite(str(GRAPHS), label=GRAPHS.name)
    summary, _ = analyse(trace, None)
    ctx = Context(trace, None)
    seg = gpu_segments(trace, 0, _op_owner(ctx), np.zeros(0, dtype=np.int64))
    split = own_time(seg, int(trace.ops.start.min()), int(trace.ops.end.max()))
    expected: dict[str, int] = {}
    for row in summary["kernel_regions"]:
        expected[row["region"]] = expected.get(row["region"], 0) + row["total_ns"]
    got = {trace.names[n]: ns for n, ns in split.items() if n >= 0}
    assert got == {r: ns for r, ns in expected.items() if r is not None}
    # A window inside one kernel that ran for a region is that region's alone (one stream: nothing overlaps it).
    owner = _op_owner(ctx)
    dur = np.where((trace.ops.kind == KERNEL) & (owner >= 0), trace.ops.end - trace.ops.start, -1)
    k = int(np.argmax(dur))
    inner = own_time(seg, int(trace.ops.start[k]), int(trace.ops.end[k]))
    assert inner == {int(owner[k]): int(dur[k]), -1: 0}


def test_no_clear_straggler_when_ranks_take_turns(tp2, slow):
    """The even TP=2 capture: no rank was slowed, so none is blamed; the latest one is still said, as such."""
    s = tp2[1]["collectives"]["straggler"]
    assert not s["clear"] and s["late_share_pct"] < 75
    assert slow[1]["collectives"]["straggler"]["clear"]


KINETO_TP2 = DATA / "torch" / "cpu-torch2.13-roseinfer-tp2"


def test_kineto_pair_per_rank_collectives_are_each_files_own(tmp_path):
    """One Kineto file per rank (each on its own Unix-time base): each rank's collectives are its file's
    `roseinfer.layer.allreduce` spans, counted straight from the JSON, and its 16 profiled decode steps match the
    other rank's by the step index of its own log."""
    import gzip
    import json

    from roseprof import api
    from roseprof.run.store import RunStore

    files = [str(KINETO_TP2 / f"rank-{r}.trace.json.gz") for r in (0, 1)]
    run = api.import_path(RunStore(tmp_path / "t"), files, None, str(KINETO_TP2 / "steplog.jsonl"))
    c = run.summary()["collectives"]
    for entry, path in zip(c["ranks"], files):
        with gzip.open(path, "rt") as fh:
            doc = json.load(fh)
        spans = [
            e for e in doc["traceEvents"] if e.get("name") == "roseinfer.layer.allreduce" and e["ph"] == "X"
        ]
        assert entry["rank"] == doc["distributedInfo"]["rank"]
        assert entry["count"] == len(spans) == 128
    assert c["matched_steps"] == 16 and c["matched"] == 128 and c["unmatched_steps"] == 0
    assert c["spread"]["p50_ns"] >= 0
    # Each file has its own clock base: the table says the spread includes their disagreement.
    from roseprof.analysis.sections.collectives import panels

    assert "each rank on its own clock" in panels(run.summary())[0]["note"]


def test_by_region_counts_equal_sql(tp2):
    """Each all-reduce is counted in the region it was issued from: SQL counts the ones inside each region."""
    _, summary = tp2
    db = sqlite3.connect(f"{TP2}.sqlite")
    ranges = (
        "SELECT e.start, e.end, e.globalTid FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId "
        "WHERE coalesce(e.text, s.value) = '{}'"
    )
    got = {r["region"]: r["count"] for r in summary["collectives"]["by_region"]}
    for region in ("roseinfer.layer.mlp", "roseinfer.layer.attention"):
        (inside,) = db.execute(
            f"SELECT count(*) FROM ({ranges.format('roseinfer.layer.allreduce')}) a "
            f"JOIN ({ranges.format(region)}) r ON a.globalTid = r.globalTid AND r.start <= a.start AND a.end <= r.end"
        ).fetchone()
        assert got[region] == inside == 512  # 2 ranks x 64 forwards x 4 layers
    assert sum(got.values()) == summary["collectives"]["count"]


def test_gpu_kernels_that_ran_for_the_allreduce_region_are_collectives(monkeypatch):
    """A GPU all-reduce that is not NCCL's (torch's symmetric memory) is found by the region its kernels ran for.
    No such capture exists here: on the real H100 graph run the attention region stands in for the all-reduce
    region, and the kernels found are exactly those the kernels section counts in it (graph replays by their
    capture-time region)."""
    import roseprof.analysis.collectives as collectives

    monkeypatch.setattr(collectives, "ALLREDUCE", "roseinfer.layer.attention")
    trace = read_nsys_sqlite(str(GRAPHS), label=GRAPHS.name)
    summary, _ = analyse(trace, None)
    inst, parts, m = instances(trace, is_collective=lambda name: False)
    expected = sum(
        r["count"] for r in summary["kernel_regions"] if r["region"] == "roseinfer.layer.attention"
    )
    assert inst.kind == "gpu" and len(inst.arrival) == expected > 0


def test_each_mlp_all_reduce_waits_for_rank_1(slow, tp2):
    """By the collective's place in the step: the MLP's all-reduces (1, 3, 5, 7: 4 layers, attention's first)
    wait ~3 ms for rank 1, the injected sleep; in the even capture no place waits that long."""
    rows = slow[1]["collectives"]["by_order"]
    assert [r["order"] for r in rows] == list(range(8))
    for r in rows[1::2]:
        assert r["region"] == "roseinfer.layer.mlp" and r["last_rank"] == 1 and r["last_pct"] >= 90
        assert r["spread_p50_ns"] >= 2.5e6
    assert all(r["region"] == "roseinfer.layer.attention" for r in rows[0::2])
    assert all(r["spread_p50_ns"] < 2.5e6 for r in tp2[1]["collectives"]["by_order"])


def test_a_rank_without_its_own_step_log_is_matched_by_order_not_against_engine_step_numbers(tmp_path):
    """Rank 0's log joins its 16 profiled steps by time (engine steps 59..74), rank 1 has no log (0..15): matched by
    those indices the ranks' collectives met steps apart (spread p50 222 ms, rank 1 named the straggler). Both are
    numbered by their order in the trace instead, as a run with no step logs is."""
    import shutil

    from roseprof import api
    from roseprof.run.store import RunStore

    for name in ("rank-0.trace.json.gz", "rank-1.trace.json.gz", "steplog.jsonl"):  # not steplog.rank1.jsonl
        shutil.copy(KINETO_TP2 / name, tmp_path / name)
    files = [str(tmp_path / f"rank-{r}.trace.json.gz") for r in (0, 1)]
    one_log = api.import_path(
        RunStore(tmp_path / "t"), files, None, str(tmp_path / "steplog.jsonl")
    ).summary()
    no_log = api.import_path(RunStore(tmp_path / "t"), files, None, None).summary()
    assert one_log["collectives"]["spread"] == no_log["collectives"]["spread"]
    assert one_log["collectives"]["matched"] == no_log["collectives"]["matched"] == 128
    assert one_log["collectives"]["unmatched_steps"] == 0
    assert any(w.startswith("rank 1: no step log of its own") for w in one_log["warnings"])
    assert one_log["steps"]["count"] == 16  # rank 0's steps still joined to its log
