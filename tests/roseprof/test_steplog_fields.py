"""Every field of every step-log record, deleted or given a value of the wrong type, through the reader AND every
analysis of it (steps, ITL, spikes): the reader skips or repairs the record, the analyses never see it raw.

The records are the real ones of a version 2 log (tests/data, an H100 capture), one preemption record added
(the capture had none) from the log's own times; each case damages one key of one record.
"""

import json
from pathlib import Path

import pytest

from roseprof.api import analyse_trace
from roseprof.drivers.nsys.reader import read_nsys_sqlite
from roseprof.workload.steplog import read_steplog
from tests.helpers import DATA

TRACE = DATA / "nsys" / "h100-nsys2025.3-roseinfer-graphs.sqlite"
LOG = DATA / "nsys" / "h100-nsys2025.3-roseinfer-graphs.steplog.jsonl"
# What a damaged log can hold where a number, a list or a flag belongs (the cases among them: an int
# where a list belongs, a float, None, the text "null", nested lists, a number beyond 2^62).
WRONG = [None, "null", 1.5, 7, [], [None], [1.5], {}, True, 2**70, -1, [[1]]]


def _records() -> list[dict]:
    records = [json.loads(line) for line in LOG.read_text().splitlines()]
    step = next(r for r in records if r["type"] == "step" and r["index"] == 20)
    records.append({"type": "preempt", "t_ns": step["start_ns"] - 1, "request": 3})
    return records


RECORDS = _records()
# One record of each kind (the 21st step: in the middle of the run) and the keys it holds.
VICTIMS = {}
for i, rec in enumerate(RECORDS):
    if rec["type"] not in VICTIMS or (rec["type"] == "step" and rec["index"] == 20):
        VICTIMS[rec["type"]] = i
CASES = [(kind, key) for kind, i in VICTIMS.items() for key in RECORDS[i] if key != "type"]


@pytest.fixture(scope="module")
def trace():
    return read_nsys_sqlite(str(TRACE))


def _analyse(trace, tmp_path: Path, records: list) -> dict:
    path = tmp_path / "steps.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    summary, _ = analyse_trace(trace, path, label=str(path), strict=True)
    json.dumps(summary, allow_nan=False)  # what the store writes
    return summary


@pytest.mark.parametrize("kind, key", CASES, ids=[f"{k}.{f}" for k, f in CASES])
def test_a_damaged_field_never_reaches_an_analysis(trace, tmp_path, kind, key):
    i = VICTIMS[kind]
    for value in ["deleted", *WRONG]:
        records = list(RECORDS)
        rec = dict(records[i])
        if value == "deleted":
            del rec[key]
        else:
            rec[key] = value
        records[i] = rec
        summary = _analyse(trace, tmp_path, records)
        log = read_steplog(str(tmp_path / "steps.jsonl"))
        kept = {"step": log.steps, "request": log.requests, "prefill": log.prefills, "gc": log.gc,
                "preempt": log.preempts, "run_start": log.run_starts}.get(kind, [])  # fmt: skip
        if log.bad_lines:
            assert any("skipped" in w for w in summary["warnings"]), (key, value, summary["warnings"])
        elif kind != "meta":  # a meta record's fields only describe the run: read as far as they make sense
            # Not skipped, so kept (as written, defaulted when absent, or repaired and said so).
            assert len(kept) == sum(r["type"] == kind for r in RECORDS), (key, value)


def test_a_20_mb_record_without_its_batch_size(trace, tmp_path):
    records = list(RECORDS)
    i = VICTIMS["step"]
    rec = {k: v for k, v in records[i].items() if k != "batch_size"}
    records[i] = {**rec, "padding": "x" * (20 << 20)}
    summary = _analyse(trace, tmp_path, records)
    assert summary["steps"]["count"] == 72 and summary["spikes"]["tokens"] > 0


def test_many_damaged_records_at_once(trace, tmp_path):
    """Several kinds of damage in one log (the robustness run's tracebacks came from such combinations)."""
    records = list(RECORDS)
    for n, i in enumerate(range(2, len(records), 3)):
        rec = dict(records[i])
        key = sorted(k for k in rec if k != "type")[n % (len(rec) - 1)]
        rec[key] = WRONG[n % len(WRONG)]
        records[i] = rec
    records.insert(5, '{"type": "prefill", "requests": 5}')
    records.insert(9, '{"type": "step", "start_ns": 1, "end_ns": 2, "requests": null}')
    summary = _analyse(trace, tmp_path, records)
    assert summary["warnings"]
