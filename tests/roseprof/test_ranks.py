"""One run of several ranks: every reader says which process each thread is, the step logs say which rank each
process is, and the step section joins rank 0's decode steps to rank 0's log (the TP=2 CPU engine run under nsys
2022.4 in tests/data/nsys, both ranks' step logs beside it)."""

from __future__ import annotations

import json

import numpy as np

from roseprof import api
from roseprof.drivers.nsys.reader import read_nsys_sqlite
from roseprof.drivers.torch.capture import merge
from roseprof.drivers.torch.reader import read_kineto
from roseprof.model import check
from roseprof.run import tables
from roseprof.run.store import RunStore
from tests.helpers import DATA

TP2 = DATA / "nsys" / "cpu-nsys2022.4-roseinfer-tp2.sqlite"
TP2_LOG = DATA / "nsys" / "cpu-nsys2022.4-roseinfer-tp2.steplog.jsonl"
TP2_PIDS = {0: 25363, 1: 25373}  # the meta records' pids, rank 0 and rank 1
HTA = DATA / "torch" / "facebookresearch__HolisticTraceAnalysis__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"


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
