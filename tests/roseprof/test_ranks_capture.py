"""A live capture of four ranks (issue 28 on CPU): `roseprof nsys` of the engine with --tensor-parallel-size 4
(four gloo processes on this machine's cores) is one run whose ranks are each process, each rank's steps joined to
its own step log, and each rank's collectives the all-reduce ranges its process recorded (counted in SQL)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from tests.helpers import engine_command, roseprof

pytestmark = pytest.mark.nsys

RANKS = 4


@pytest.fixture(scope="module")
def tp4_capture(tmp_path_factory):
    traces = tmp_path_factory.mktemp("traces")
    # 16 new tokens: what is asserted (each rank's process, steps and all-reduce ranges) holds for any length, and
    # four ranks on 2 cores spend the run in decode steps (this module took 1.5x the CPU time with 70 tokens)
    command = engine_command(
        "roseinfer.benchmark_streaming", 4, "--hf-model-id", "gpt2-tiny", "--tensor-parallel-size", str(RANKS),
        new_tokens=16,
    )  # fmt: skip
    # Nsight Systems 2022.4 sometimes holds a multi-process program at its exit: rank 0's last event, then minutes
    # in exit() inside nsys' injection library (a timed wait under __cxa_finalize, after "OS runtime libraries
    # profiling finished") before the capture completes, intact. Seen here 109 s once in 45 captures of this command,
    # ~8 min in session 10, and past the 600 s default once in CI; a bare spawn-and-join script stalls the same
    # way (docs/BENCHMARKS.md, session 25). Not ours to shorten; a stall longer than this is a failure.
    proc = roseprof(
        "nsys", "--name", "tp4", "--traces-dir", traces, "--dashboards-dir", tmp_path_factory.mktemp("dash"),
        "--", *command, timeout=1800,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = [p for p in traces.iterdir() if not p.name.startswith(".")]
    return proc, run


def _logs(run):
    """{rank: (meta, step count)} from the run folder's step logs."""
    out = {}
    for path in sorted(run.glob("steplog*.jsonl")):
        records = [json.loads(line) for line in path.read_text().splitlines()]
        meta = records[0]
        out[meta["rank"]] = (meta, sum(r["type"] == "step" for r in records))
    return out


def test_every_rank_is_its_process_with_its_own_steps(tp4_capture):
    proc, run = tp4_capture
    summary = json.loads((run / "summary.json").read_text())
    logs = _logs(run)
    assert sorted(logs) == list(range(RANKS))
    ranks = summary["ranks"]
    assert [r["rank"] for r in ranks] == list(range(RANKS))
    for entry in ranks:
        meta, steps = logs[entry["rank"]]
        assert (
            entry["pid"] == meta["pid"] and entry["world_size"] == RANKS and entry["rank_from"] == "step log"
        )
        assert entry["steps"]["count"] == steps
    assert summary["steps"]["count"] == logs[0][1]  # the all-ranks step table is rank 0's
    assert not any("step log has" in w for w in summary["warnings"])
    assert "ranks: each rank's steps" in proc.stdout


def test_each_ranks_collectives_are_its_processes_allreduce_ranges(tp4_capture):
    _, run = tp4_capture
    summary = json.loads((run / "summary.json").read_text())
    db = sqlite3.connect(run / "raw" / "trace.sqlite")
    # nsys' globalTid holds the pid in bits 24..47; the all-reduce region is an NVTX push/pop range.
    counted = dict(
        db.execute(
            "SELECT (e.globalTid >> 24) & 16777215, count(*) FROM NVTX_EVENTS e "
            "LEFT JOIN StringIds s ON e.textId = s.id "
            "WHERE coalesce(e.text, s.value) = 'roseinfer.layer.allreduce' GROUP BY 1"
        ).fetchall()
    )
    rows = {r["pid"]: r for r in summary["collectives"]["ranks"]}
    assert len(counted) == RANKS
    assert {pid: r["count"] for pid, r in rows.items()} == counted
