"""Multi-rank inputs whose ranks cannot be compared or cannot be one run's (issue 46), each derived at test time from
the real TP=2 Kineto folder with test_hostile_ranks.py's helpers: ranks whose timings disagree (clocks apart, step
logs swapped or repeated, collectives paired by order) must name no straggler with confidence (item 6); a rank
that cannot be, a world size of 0, two runs' files in one folder must not be accepted in silence (item 7)."""

from __future__ import annotations

import html
import json
import shutil
from pathlib import Path

import pytest

from tests.helpers import DATA
from tests.roseprof.test_hostile_ranks import TP2, _cli, _folder, _refused, _run, _said

# ---- item 6: a straggler named with confidence where the ranks' timings cannot be compared ---------------------


def _logs(folder, change) -> None:
    """Both step logs of `folder` passed through `change(rank, lines)` -> lines (JSON lines, parsed)."""
    for rank, name in enumerate(["steplog.jsonl", "steplog.rank1.jsonl"]):
        path = folder / name
        lines = [json.loads(x) for x in path.read_text().splitlines()]
        path.write_text("".join(json.dumps(x) + "\n" for x in change(rank, lines)))


def _first_lines(proc, n=6) -> str:
    """The first lines show prints after the run's id and source, as one line of words."""
    return " ".join(" ".join(proc.stdout.splitlines()[2 : 2 + n]).split())


def _shift(doc):
    doc["baseTimeNanoseconds"] += 5_000_000  # rank 1's clock 5 ms ahead (an hour is refused: item 3)


def _repeat_steps(rank, lines):
    return [y for x in lines for y in ([x, x] if rank == 1 and x["type"] == "step" else [x])]


def _swap_pids(rank, lines):
    lines[0]["pid"] = {0: 2201, 1: 2155}[rank]  # each log's meta names the other rank's process
    return lines


def test_the_unmodified_pair_names_no_straggler_and_has_no_doubt(tmp_path):
    folder = _folder(tmp_path, lambda doc: None)
    proc = _cli(tmp_path, "import", folder, "--steplog", f"{folder}/steplog.jsonl")
    assert proc.returncode == 0, proc.stderr
    _, summary = _run(tmp_path)
    assert summary["rank_clock"]["doubts"] == []
    assert summary["collectives"]["straggler"]["clear"] is False
    assert "no clear straggler" in _said(proc)


@pytest.mark.parametrize(
    "trace_change, log_change, first",
    [
        (_shift, None, "the ranks' clocks disagree, or their step logs pair different steps"),
        (
            None,
            _swap_pids,
            "the step logs do not match their traces: rank 0's log names pid 2201, which its trace "
            "says is rank 1",
        ),  # fmt: skip
    ],
    ids=["rank 1's clock 5 ms ahead", "the logs' pids swapped"],
)
def test_ranks_whose_timings_disagree_are_said_first_and_name_no_straggler(
    tmp_path, trace_change, log_change, first
):
    """Once: "straggler rank 1, late 3,600,005 ms" for an hour's shift, "straggler rank 0, late 1.04 ms" for the
    swapped logs. Now the first lines say why the ranks cannot be compared, and no rank is blamed."""
    folder = Path(_folder(tmp_path, trace_change or (lambda doc: None)))
    if log_change:
        _logs(folder, log_change)
    proc = _cli(tmp_path, "import", folder, "--steplog", folder / "steplog.jsonl")
    assert proc.returncode == 0, proc.stderr
    assert first in _first_lines(proc), proc.stdout[:1500]
    assert "no straggler is named" in _said(proc)
    assert "straggler:" not in _said(proc) and "no clear straggler" not in _said(proc)
    manifest, summary = _run(tmp_path)
    assert summary["collectives"]["straggler"] is None and summary["collectives"]["spikes"] is None
    assert any(first in d for d in summary["rank_clock"]["doubts"])
    page = (tmp_path / "d" / f"{manifest['run_id']}.html").read_text()  # the dashboard's warnings, first
    assert html.escape(summary["rank_clock"]["doubts"][0]) in page


def test_a_step_log_with_every_record_twice_is_read_once_with_a_warning(tmp_path):
    """Rank 1's log with every step record twice: its steps paired with the wrong ranges, and "straggler rank 0,
    late 5.91 ms". A repeated record is skipped (a warning counts them) and the run is the sound one."""
    folder = Path(_folder(tmp_path, lambda doc: None))
    _logs(folder, _repeat_steps)
    proc = _cli(tmp_path, "import", folder, "--steplog", folder / "steplog.jsonl")
    assert proc.returncode == 0, proc.stderr
    _, summary = _run(tmp_path)
    assert summary["rank_clock"]["doubts"] == []
    assert summary["collectives"]["straggler"]["clear"] is False
    assert any(w.endswith("24 line(s) skipped: a step record repeating an earlier one (same index, start and end)")
               for w in summary["warnings"])  # fmt: skip


def test_collectives_paired_by_order_are_no_clock_measure(tmp_path):
    """No decode step in either file (the step range renamed, no step log): the collectives are paired by order,
    which pairs one step's all-reduce with another's; their ends' spread (0.5 ms p50 where the clocks agree to
    0.4 us) is said to be no clock measure, and raises no doubt."""

    def rename(doc):
        for e in doc["traceEvents"]:
            if e.get("name") == "roseinfer.decode_step":
                e["name"] = "other.step"

    proc = _cli(tmp_path, "import", _folder(tmp_path, rename, ranks=(0, 1)))
    assert proc.returncode == 0, proc.stderr
    assert "collectives paired by order, which says nothing of how well the clocks agree" in _said(proc)
    _, summary = _run(tmp_path)
    assert summary["rank_clock"]["collectives"]["matched_by"] == "order"
    assert summary["rank_clock"]["doubts"] == []


# ---- item 7: ranks that cannot be one run's, accepted in silence ------------------------------------------------


def _meta(rank_of_file: int, **values):
    """A `_logs` change: the meta record of rank `rank_of_file`'s log updated with `values`."""

    def change(rank, lines):
        if rank == rank_of_file:
            lines[0].update(values)
        return lines

    return change


@pytest.mark.parametrize(
    "trace_info, log_change, words",
    [
        ({"rank": 7}, None, "rank-1.trace.json.gz: its distributedInfo says rank 7 of a world size of 2: no such rank"),
        (None, _meta(1, rank=7), "steplog.rank1.jsonl: its meta record says rank 7 of a world size of 2: no such rank"),
        (None, _meta(1, rank=0), "steplog.rank1.jsonl: its meta record says rank 0, as"),
    ],
    ids=["trace: rank 7 of world 2", "step log: rank 7 of world 2", "two step logs claiming rank 0"],
)  # fmt: skip
def test_a_rank_that_cannot_be_is_refused_in_one_line(tmp_path, trace_info, log_change, words):
    """Rank 7 of a world of 2 was read as rank 7 (or overruled by the step log, in silence); two logs that both say
    rank 0 made one rank of two processes (28 steps, 647 collectives, no rank 1). Refused, nothing stored."""
    folder = Path(_folder(tmp_path, lambda doc: doc["distributedInfo"].update(trace_info or {})))
    if log_change:
        _logs(folder, log_change)
    proc = _cli(tmp_path, "import", folder, "--steplog", folder / "steplog.jsonl")
    _refused(tmp_path, proc, words)


@pytest.mark.parametrize("where", ["trace", "step log"])
def test_a_world_size_of_0_is_read_as_unknown_with_a_line(tmp_path, where):
    folder = Path(
        _folder(
            tmp_path, lambda doc: doc["distributedInfo"].update(world_size=0) if where == "trace" else None
        )
    )
    if where == "step log":
        _logs(folder, _meta(1, world_size=0))
    proc = _cli(tmp_path, "import", folder, "--steplog", folder / "steplog.jsonl")
    assert proc.returncode == 0, proc.stderr
    _, summary = _run(tmp_path)
    said = (
        "rank-1.trace.json.gz: its distributedInfo"
        if where == "trace"
        else "steplog.rank1.jsonl: its meta record"
    )
    assert any(said in w and w.endswith("says world size 0, which is no world: read as unknown")
               for w in summary["warnings"]), summary["warnings"]  # fmt: skip
    assert [(e["rank"], e["world_size"]) for e in summary["ranks"]] == [(0, 2), (1, 2)]


def test_two_runs_files_in_one_folder_are_refused(tmp_path):
    """Rank 0 of the 2-H200 capture beside rank 1 of the CPU TP=2 capture (both of a world of 2, ranks 0 and 1):
    once merged as one run, every cross-rank figure compared two programs hours apart."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    shutil.copy(TP2 / "rank-0.trace.json.gz", folder)
    shutil.copy(DATA / "torch" / "cpu-torch2.13-roseinfer-tp2" / "rank-1.trace.json.gz", folder)
    line = _refused(
        tmp_path,
        _cli(tmp_path, "import", folder),
        "rank-1.trace.json.gz: its events lie",
        "not one run's files",
    )
    assert "2.7 h before those of" in line
