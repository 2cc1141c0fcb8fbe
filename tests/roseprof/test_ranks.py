"""One run of several ranks: every reader says which process each thread is, the step logs say which rank each
process is, and the step section joins rank 0's decode steps to rank 0's log (the TP=2 CPU engine run under nsys
2022.4 in tests/data/nsys, both ranks' step logs beside it)."""

from __future__ import annotations

import gzip
import json
import sqlite3
from collections import Counter

import numpy as np
import pytest

from roseprof import api
from roseprof.drivers.nsys.reader import read_nsys_sqlite
from roseprof.drivers.torch.capture import merge
from roseprof.drivers.torch.reader import read_kineto
from roseprof.errors import RoseprofError
from roseprof.model_check import check
from roseprof.run import tables
from roseprof.run.store import RunStore
from tests.helpers import DATA, packed

TP2 = DATA / "nsys" / "cpu-nsys2022.4-roseinfer-tp2.sqlite"
TP2_LOG = DATA / "nsys" / "cpu-nsys2022.4-roseinfer-tp2.steplog.jsonl"
TP2_PIDS = {0: 25363, 1: 25373}  # the meta records' pids, rank 0 and rank 1
HTA = DATA / "torch" / "facebookresearch__HolisticTraceAnalysis__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"
TP2_KINETO = (
    DATA / "torch" / "cpu-torch2.13-roseinfer-tp2"
)  # HTA's layout: rank-<r>.trace.json.gz, one per rank
TP2_KINETO_LOG = TP2_KINETO / "steplog.jsonl"  # and steplog.rank1.jsonl beside it
GPU_TP2 = DATA / "torch" / "h200x2-torch2.11-roseinfer-tp2"  # the same layout, NCCL on 2 H200s


def test_nsys_reader_names_every_threads_process():
    trace = read_nsys_sqlite(str(TP2))
    used = trace.used_thread_ids()
    assert set(trace.thread_pids) == set(used.tolist())
    assert sorted(trace.processes) == sorted(TP2_PIDS.values())
    assert {p.name for p in trace.processes.values()} == {"python"}  # nsys' PROCESSES table
    assert all(p.rank is None for p in trace.processes.values())  # nsys itself does not know the rank
    assert (trace.pids(trace.ranges.tid) >= 0).all()


def test_kineto_reader_takes_the_rank_from_distributed_info():
    trace = read_kineto(HTA)
    (process,) = trace.processes.values()
    assert (process.pid, process.rank, process.world_size) == (1102, 0, 1)
    assert process.rank_from == "kineto distributedInfo"
    assert set(trace.thread_pids.values()) == {1102}


def test_merge_keeps_two_files_with_one_pid_apart():
    a, b = read_kineto(HTA), read_kineto(HTA)
    merged = merge([a, b])
    assert check(merged) == []
    assert len(merged.processes) == 2 and 1102 in merged.processes
    other = next(p for pid, p in merged.processes.items() if pid != 1102)
    assert "pid 1102" in other.name
    pids = merged.pids(merged.ranges.tid)
    assert (pids >= 0).all()
    assert sorted(np.bincount(np.unique(pids, return_inverse=True)[1]).tolist()) == [len(a.ranges)] * 2
    assert set(merged.thread_pids) == set(merged.used_thread_ids().tolist())


def test_tp2_import_joins_rank0_steps_to_rank0_log(tmp_path):
    store = RunStore(tmp_path / "traces")
    run = api.import_path(store, str(TP2), None, str(TP2_LOG))
    summary = run.summary()
    assert not any("step log has" in w for w in summary["warnings"])
    log_steps = [json.loads(x) for x in TP2_LOG.read_text().splitlines() if '"type":"step"' in x]
    assert summary["steps"]["count"] == len(log_steps) == 63
    assert (run.path / "steplog.rank1.jsonl").is_file()  # both ranks' logs are kept in the run
    stored = tables.read_trace(run.path)
    ranks = {p.rank: (pid, p.world_size, p.rank_from) for pid, p in stored.processes.items()}
    assert ranks == {r: (pid, 2, "step log") for r, pid in TP2_PIDS.items()}
    steps = tables.read_steps(run.path)["rows"]
    # Rank 0's ranges: the steps start where rank 0's decode_step ranges start, every one of them.
    trace = read_nsys_sqlite(str(TP2))
    decode = trace.names.find("roseinfer.decode_step")
    mine = (trace.ranges.name == decode) & (trace.pids(trace.ranges.tid) == TP2_PIDS[0])
    assert steps["start_ns"] == sorted(trace.ranges.start[mine].tolist())


def test_without_step_logs_the_steps_are_one_process_not_both_interleaved(tmp_path):
    store = RunStore(tmp_path / "traces")
    run = api.import_path(store, str(TP2), None, None)
    summary = run.summary()
    trace = read_nsys_sqlite(str(TP2))
    decode = trace.names.find("roseinfer.decode_step")
    lowest = (trace.ranges.name == decode) & (trace.pids(trace.ranges.tid) == min(TP2_PIDS.values()))
    assert summary["steps"]["count"] == int(lowest.sum()) == 63  # not 126: both ranks' ranges as one sequence
    assert tables.read_steps(run.path)["rows"]["start_ns"] == sorted(trace.ranges.start[lowest].tolist())
    assert any(f"the steps are those of pid {min(TP2_PIDS.values())}" in w for w in summary["warnings"])


def test_a_run_stored_before_processes_reads_with_none(tmp_path):
    store = RunStore(tmp_path / "traces")
    run = api.import_path(store, str(TP2), None, str(TP2_LOG))
    names = json.loads((run.path / "names.json").read_text())
    assert names["version"] == tables.TABLES_VERSION
    for key in ("processes", "thread_pids"):
        names.pop(key)
    names["version"] = 2
    (run.path / "names.json").write_text(json.dumps(names))
    old = tables.read_trace(run.path)
    assert old.processes == {} and old.thread_pids == {}
    assert (old.pids(old.ranges.tid) == -1).all()


def _tp2_nsys_summary(tmp_path) -> dict:
    return api.import_path(RunStore(tmp_path / "traces"), str(TP2), None, str(TP2_LOG)).summary()


def test_tp2_nsys_per_rank_ranges_are_each_process_rows(tmp_path):
    """Truth: each rank's region counts and totals are a direct count of its process' NVTX ranges."""
    summary = _tp2_nsys_summary(tmp_path)
    db = sqlite3.connect(TP2)
    rows = db.execute(
        "SELECT (e.globalTid >> 24) & 16777215, coalesce(s.value, e.text), count(*), sum(e.end - e.start) "
        "FROM NVTX_EVENTS e LEFT JOIN StringIds s ON e.textId = s.id "
        "WHERE e.eventType IN (59, 60, 70, 71) GROUP BY 1, 2"
    ).fetchall()
    db.close()
    want: dict[int, dict[str, tuple[int, int]]] = {}
    for pid, name, count, total in rows:
        want.setdefault(pid, {})[name] = (count, total)
    by_pid = {e["pid"]: e for e in summary["ranks"]}
    assert sorted(by_pid) == sorted(want) == sorted(TP2_PIDS.values())
    for pid, regions in want.items():
        got = {r["name"]: (r["count"], r["total_ns"]) for r in by_pid[pid]["regions"]}
        assert got == regions
        assert by_pid[pid]["range_count"] == sum(c for c, _ in regions.values())
        assert by_pid[pid]["rank"] == {v: k for k, v in TP2_PIDS.items()}[pid]


def test_tp2_nsys_each_rank_joins_its_own_log(tmp_path):
    summary = _tp2_nsys_summary(tmp_path)
    for entry in summary["ranks"]:
        log = (
            TP2_LOG
            if entry["rank"] == 0
            else TP2_LOG.with_name(TP2_LOG.name.replace(".jsonl", ".rank1.jsonl"))
        )
        records = [json.loads(x) for x in log.read_text().splitlines()]
        assert records[0]["pid"] == entry["pid"] and records[0]["rank"] == entry["rank"]
        assert entry["steps"]["count"] == sum(r["type"] == "step" for r in records)
    assert summary["rank_clock"]["how"].startswith("one host clock")
    assert summary["ranks"][0]["steps"]["p50_ns"] == summary["steps"]["p50_ns"]


def _kernel_events(path) -> int:
    """Kernels in a Kineto file, counted straight from its JSON."""
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return sum(1 for e in events if e.get("ph") == "X" and e.get("cat") in ("kernel", "Kernel"))


def test_kineto_per_rank_kernels_are_each_files_own(tmp_path):
    """Truth: the two real Kineto files of the 2-H200 TP=2 capture imported as one run: each process' kernel count
    and time are its file's. (Two other runs' files, HTA's and Kineto's samples, are no longer merged: their events
    lie 1,031 days apart, test_two_runs_files_are_not_merged.)"""
    files = [GPU_TP2 / "rank-0.trace.json.gz", GPU_TP2 / "rank-1.trace.json.gz"]
    run = api.import_path(RunStore(tmp_path / "traces"), [str(f) for f in files], None, None)
    summary = run.summary()
    entries = summary["ranks"]
    assert [(e["label"], e["pid"]) for e in entries] == [("rank 0", 2155), ("rank 1", 2201)]
    for entry, path in zip(entries, files):
        alone = read_kineto(path)
        kernel = alone.ops.kind == 0
        assert entry["kernel_count"] == _kernel_events(path) == int(kernel.sum())
        assert entry["kernel_ns"] == int((alone.ops.end - alone.ops.start)[kernel].sum())
    assert summary["rank_clock"]["kernels_of_no_rank"] == 0
    # The conservation line per rank: the ranks' kernel time, and the part of it some region accounts for, add up
    # to the all-ranks line.
    line = summary["kernel_attribution"]
    assert sum(e["kernel_ns"] for e in entries) == line["kernel_ns"]
    assert sum(e["kernel_in_regions_ns"] for e in entries) == line["attributed_ns"]
    assert all(0 <= e["kernel_in_regions_ns"] <= e["kernel_ns"] for e in entries)
    assert run.manifest["sources"] == [str(f.resolve()) for f in files]


def _annotations(path) -> Counter:
    with gzip.open(path, "rt") as fh:
        events = json.load(fh)["traceEvents"]
    return Counter(e["name"] for e in events if e.get("ph") == "X" and e.get("cat") == "user_annotation")


def test_kineto_rank_folder_is_one_run_of_two_ranks(tmp_path):
    """Our own TP=2 capture (one Kineto file per rank, HTA's folder layout): each rank's regions are its file's
    record_function spans, each rank's 16 profiled decode steps join its own step log by time."""
    folder = TP2_KINETO
    run = api.import_path(RunStore(tmp_path / "traces"), str(folder), None, str(TP2_KINETO_LOG))
    summary = run.summary()
    assert summary["warnings"] == []
    assert [e["rank"] for e in summary["ranks"]] == [0, 1]
    for entry in summary["ranks"]:
        want = _annotations(folder / f"rank-{entry['rank']}.trace.json.gz")
        assert {r["name"]: r["count"] for r in entry["regions"]} == dict(want)
        assert entry["rank_from"] == "step log" and entry["world_size"] == 2
        assert entry["steps"]["count"] == 16
    steps = tables.read_steps(run.path)
    assert sorted(steps["ranks"]) == ["rank 0", "rank 1"]
    assert steps["ranks"]["rank 1"]["index"] == steps["rows"]["index"]  # the same engine steps on every rank
    assert summary["rank_clock"]["how"].startswith("Unix time")


def test_a_run_of_one_process_has_no_rank_entries(tmp_path):
    store = RunStore(tmp_path / "traces")
    summary = api.import_path(store, str(DATA / "nsys" / "cpu-nsys2022.4-nvtx.sqlite"), None, None).summary()
    assert summary["ranks"] == [] and summary["rank_clock"] is None


def test_several_nsys_files_are_refused_in_one_line(tmp_path):
    with pytest.raises(RoseprofError, match="one file per rank is read for torch.profiler"):
        api.import_path(RunStore(tmp_path / "traces"), [str(TP2), str(TP2)], None, None)
    assert not (tmp_path / "traces").exists() or not any((tmp_path / "traces").iterdir())


def test_the_rank_panel_fits_80_columns(tmp_path):
    from roseprof.analysis.sections.ranks import panels

    (panel,) = panels(_tp2_nsys_summary(tmp_path))
    widths = [max(len(c), *(len(r[i]) for r in panel["rows"])) for i, c in enumerate(panel["columns"])]
    assert sum(widths) + 2 * (len(widths) - 1) <= 80
    assert [r[0] for r in panel["rows"]] == ["0", "1"]


def test_diff_compares_each_rank(tmp_path):
    from types import SimpleNamespace

    from roseprof.analysis.sections.ranks import diff_metrics

    before = SimpleNamespace(summary=_tp2_nsys_summary(tmp_path / "a"))
    after = SimpleNamespace(summary=_tp2_nsys_summary(tmp_path / "b"))
    metrics = {m["name"]: (m["a"], m["b"]) for m in diff_metrics([before], [after])}
    p50 = {e["label"]: e["steps"]["p50_ns"] for e in before.summary["ranks"]}
    assert metrics == {
        "ranks.rank0.step_p50_ns": (p50["rank 0"], p50["rank 0"]),
        "ranks.rank1.step_p50_ns": (p50["rank 1"], p50["rank 1"]),
    }  # no kernel on a CPU run: no kernel-time metric


def test_a_folder_without_traces_is_refused_in_one_line(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(RoseprofError, match="is a folder with no trace in it"):
        api.import_path(RunStore(tmp_path / "traces"), str(tmp_path / "empty"), None, None)


def _pair_with_rank1_log(folder, rank1_log: bytes) -> list[str]:
    """The Kineto TP=2 pair and rank 0's log copied into `folder`, with `rank1_log` as steplog.rank1.jsonl."""
    import shutil

    folder.mkdir()
    for name in ("rank-0.trace.json.gz", "rank-1.trace.json.gz", "steplog.jsonl"):
        shutil.copy(TP2_KINETO / name, folder / name)
    (folder / "steplog.rank1.jsonl").write_bytes(rank1_log)
    return [str(folder / f"rank-{r}.trace.json.gz") for r in (0, 1)]


def test_a_rank_log_with_no_record_is_refused_naming_that_file(tmp_path):
    """A rank 1 log that holds no record was dropped without a word; rank 0's is refused, so rank 1's is too,
    naming the user's steplog.rank1.jsonl, and no run folder is left behind."""
    files = _pair_with_rank1_log(tmp_path / "in", b"not a step log\n")
    log = str(tmp_path / "in" / "steplog.jsonl")
    with pytest.raises(RoseprofError, match=r"steplog\.rank1\.jsonl: not a roseinfer step log"):
        api.import_path(RunStore(tmp_path / "traces"), files, None, log)
    assert not (tmp_path / "traces").exists()


def test_a_damaged_rank_log_is_named_in_its_warning(tmp_path):
    """Rank 1's log cut in the middle of a line: its warning names steplog.rank1.jsonl, not rank 0's file."""
    whole = (TP2_KINETO / "steplog.rank1.jsonl").read_bytes()
    files = _pair_with_rank1_log(tmp_path / "in", whole[: len(whole) // 2] + b'{"type": "st\n')
    log = str(tmp_path / "in" / "steplog.jsonl")
    summary = api.import_path(RunStore(tmp_path / "traces"), files, None, log).summary()
    damaged = [w for w in summary["warnings"] if "line(s)" in w]
    assert damaged and all(w.startswith(f"{tmp_path / 'in' / 'steplog.rank1.jsonl'}: ") for w in damaged)


def test_two_files_of_one_rank_are_not_merged_into_that_rank(tmp_path):
    """Our rank 0 beside a copy of itself (copies made for a benchmark): both files say rank 0, and merged as one
    rank its 128 all-reduces would be two files' 256 and its step count one file's. The later file's process is
    kept apart, of unknown rank, and a warning names both files."""
    copy = tmp_path / "copy" / "rank-0.trace.json.gz"
    copy.parent.mkdir()
    copy.write_bytes((TP2_KINETO / "rank-0.trace.json.gz").read_bytes())
    files = [str(TP2_KINETO / "rank-0.trace.json.gz"), str(copy)]
    summary = api.import_path(RunStore(tmp_path / "traces"), files, None, None).summary()
    labels = [e["label"] for e in summary["ranks"]]
    assert labels[0] == "rank 0" and labels[1].startswith("pid ") and len(labels) == 2
    assert all(len(e["pids"]) == 1 for e in summary["ranks"])
    assert [c["count"] for c in summary["collectives"]["ranks"]][:1] == [128]  # rank 0's own all-reduces only
    assert any(w.startswith(f"{copy}: says rank 0") and files[0] in w for w in summary["warnings"])


def test_two_runs_files_are_not_merged(tmp_path):
    """Our rank 0 beside HTA's rank 0 (a DDP job of 2021): their events lie 964 days apart on the Unix clock, so
    they are not one run's; merged, every cross-rank figure (collectives, stragglers, clocks) compared two programs.
    Refused in one line naming the later file, and nothing stored."""
    files = [str(TP2_KINETO / "rank-0.trace.json.gz"), str(HTA)]
    with pytest.raises(RoseprofError, match=r"HolisticTraceAnalysis.*: its events lie 964.1 days before those of "
                                            r".*rank-0.trace.json.gz .*not one run's files"):  # fmt: skip
        api.import_path(RunStore(tmp_path / "traces"), files, None, None)
    assert not (tmp_path / "traces").exists()


def test_a_rank_missing_from_the_trace_is_said(tmp_path):
    """Rank 0's Kineto file alone, with both ranks' step logs (world size 2): the run is one rank's, and says so."""
    run = api.import_path(
        RunStore(tmp_path / "traces"), str(TP2_KINETO / "rank-0.trace.json.gz"), None, str(TP2_KINETO_LOG)
    )
    summary = run.summary()
    assert [e["label"] for e in summary["ranks"]] == ["rank 0"]
    assert any(
        w.startswith("world size 2, but the trace holds no process of rank(s) 1") for w in summary["warnings"]
    )


def test_a_run_whose_rank_0_is_unknown_says_whose_steps_it_shows(tmp_path):
    """Only rank 1's step log given (as --steplog): rank 1's process is known, rank 0's is not, and the step table,
    rank 1's steps, says so instead of passing for rank 0's."""
    log1 = DATA / "nsys" / "cpu-nsys2022.4-roseinfer-tp2.steplog.rank1.jsonl"
    run = api.import_path(RunStore(tmp_path / "traces"), str(TP2), None, str(log1))
    summary = run.summary()
    trace = read_nsys_sqlite(str(TP2))
    decode = trace.names.find("roseinfer.decode_step")
    rank1 = (trace.ranges.name == decode) & (trace.pids(trace.ranges.tid) == TP2_PIDS[1])
    assert tables.read_steps(run.path)["rows"]["start_ns"] == sorted(trace.ranges.start[rank1].tolist())
    assert any(w.startswith("no process of the trace is known as rank 0") for w in summary["warnings"])


def test_when_only_one_process_marks_the_steps_their_gpu_figures_are_its_kernels_alone():
    # The real two-GPU capture with rank 1's ranges taken out: two processes launch kernels, one marks the steps
    # (a program whose other ranks push no NVTX). The steady state's GPU figures stay that process's, as with
    # both ranks' ranges, never both GPUs' kernels counted in its step windows.
    from roseprof.api.sections import analyse_trace
    from roseprof.model import Ranges

    path = packed(DATA / "nsys" / "h200x2-nsys2025.3-roseinfer-tp2.sqlite")
    seen = []
    for drop in (False, True):
        trace = read_nsys_sqlite(path)
        if drop:
            r = trace.ranges
            keep = trace.pids(r.tid) != 1571
            trace.ranges = Ranges(
                r.start[keep], r.end[keep], r.name[keep], r.domain[keep], r.tid[keep], r.style[keep]
            )
        steady = analyse_trace(trace, None)[0]["steady"]
        seen.append((steady["gpus"], steady["pids"], steady["step"]["gpu_mean_ns"]))
    assert seen[0] == seen[1] and seen[0][:2] == (1, [1525])


def test_a_process_that_marks_the_steps_beside_the_one_that_launches_the_kernels_keeps_every_kernel():
    # The same capture, rank 1's ranges out and all but one of rank 0's launches moved to a thread of rank 1: one
    # process marks the steps (an API process, say) and launches one kernel; the other launches the rest. The steps'
    # GPU figures are every process's kernels then, not the marking process's one (which would read 0).
    from roseprof.api.sections import analyse_trace
    from roseprof.model import KERNEL, Ranges

    trace = read_nsys_sqlite(packed(DATA / "nsys" / "h200x2-nsys2025.3-roseinfer-tp2.sqlite"))
    r, o = trace.ranges, trace.ops
    keep = trace.pids(r.tid) != 1571
    trace.ranges = Ranges(
        r.start[keep], r.end[keep], r.name[keep], r.domain[keep], r.tid[keep], r.style[keep]
    )
    other = next(t for t, p in trace.thread_pids.items() if p == 1571)
    marking = np.flatnonzero((o.kind == KERNEL) & (trace.pids(o.api_tid) == 1525))
    o.api_tid[marking[1:]] = other
    steady = analyse_trace(trace, None)[0]["steady"]
    assert steady["pids"] is None and steady["gpus"] == 2 and steady["step"]["gpu_mean_ns"] > 0


def test_the_gpu_note_names_the_steps_process_only_where_there_is_gpu_time():
    from roseprof.render.text import gpus_note

    assert (
        gpus_note({"pids": [25363], "gpus": 0, "rank": 0}) is None
    )  # a CPU run of two ranks: no GPU figures
    assert gpus_note({"pids": None, "gpus": 1}) is None  # one process
    assert "(pid 7, rank 1)" in gpus_note({"pids": [7], "gpus": 1, "rank": 1})
    assert "(pid 7, its rank unknown)" in gpus_note({"pids": [7], "gpus": 1, "rank": -1})
