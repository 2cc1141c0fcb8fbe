"""Damaged step logs (`roseprof import --steplog`): damaged lines are skipped or repaired and named in the
summary's warnings; a file with no step-log record at all is refused in one line naming it."""

import json

import pytest

from roseprof.workload.steplog import read_steplog
from tests.helpers import DATA, one_line_error, run_cli

DECODE = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.sqlite"
LOG = DATA / "nsys" / "h100-nsys2025.3-roseinfer-decode.steplog.jsonl"
LINES = LOG.read_text().splitlines()
RECORDS = [json.loads(line) for line in LINES]


def request_line(change) -> list[str]:
    out, done = [], False
    for rec in RECORDS:
        if rec["type"] == "request" and not done:
            rec = change(dict(rec))
            done = True
        out.append(json.dumps(rec) if not isinstance(rec, str) else rec)
    return out


DAMAGED = {
    "short token_step": (
        request_line(lambda r: {**r, "token_step": r["token_step"][:5]}),
        "repaired: token_step",
    ),
    "long token_step": (request_line(lambda r: {**r, "token_step": r["token_step"] + [1, 2]}), "repaired"),
    "missing token_ns": (
        request_line(lambda r: {k: v for k, v in r.items() if k != "token_ns"}),
        "invalid token_ns",
    ),
    "text arrival": (request_line(lambda r: {**r, "arrival_ns": "soon"}), "invalid arrival_ns"),
    "NaN": (request_line(lambda r: '{"type": "request", "arrival_ns": NaN}'), "NaN or Infinity"),
    "non-object lines": (LINES + ["[1, 2]", "3", '"step"', "null"], "not a JSON object"),
    "deep nesting": (LINES + ["[" * 100000 + "]" * 100000], "nested too deeply"),
    "cut short": (LINES[:-1] + [LINES[-1][:50]], "not JSON"),
    "step ends before start": (
        LINES + ['{"type":"step","start_ns":10,"end_ns":5}'],
        "ending before it starts",
    ),
    "huge numbers": (LINES + ['{"type":"step","start_ns":1,"end_ns":' + "9" * 40 + "}"], "invalid end_ns"),
    "bool as number": (LINES + ['{"type":"step","start_ns":true,"end_ns":5}'], "invalid start_ns"),
    "invalid UTF-8": (LINES + ['{"type":"meta","x":"\udcff"}'], None),
    # a live run's window pauses (roseprof/live/load_steps.py) with a step that is no number
    "damaged profiler pauses": (
        [
            json.dumps(
                {
                    **RECORDS[0],
                    "profiler_pauses": [{"after_step": "5", "what": "x", "loop_ms": 1, "beside_ms": 0}],
                }
            )
        ]
        + LINES[1:],
        "repaired: damaged profiler pauses",
    ),
}


@pytest.mark.parametrize("case", DAMAGED)
def test_damaged_lines_become_warnings(tmp_path, case):
    lines, warning = DAMAGED[case]
    log = tmp_path / "steps.jsonl"
    log.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape") + b"\n")
    code, out, err = run_cli(
        "import", DECODE, "--steplog", log, "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d"
    )
    assert code == 0 and "Traceback" not in err and "internal error" not in err, err
    (run,) = (tmp_path / "t").iterdir()
    summary = json.loads((run / "summary.json").read_text())
    if warning:
        assert any(str(log) in w and warning in w for w in summary["warnings"]), summary["warnings"]
    assert summary["steps"]["count"] == 71


@pytest.mark.parametrize(
    "content",
    [
        bytes(range(256)) * 64,
        b"\x00" * 1000,
        DECODE.read_bytes()[:65536],
        b"hello\nworld\n",
        b"{}\n[]\n",
        b"",
    ],
    ids=["binary", "zeros", "an sqlite file", "text", "empty objects", "empty"],
)
def test_a_file_that_is_not_a_step_log_is_refused(tmp_path, content):
    log = tmp_path / "not-a-log.jsonl"
    log.write_bytes(content)
    code, out, err = run_cli(
        "import", DECODE, "--steplog", log, "--traces-dir", tmp_path / "t", "--dashboards-dir", tmp_path / "d"
    )
    line = one_line_error(code, out, err, naming=log)
    assert "not a roseinfer step log" in line
    assert not (tmp_path / "t").exists() or list((tmp_path / "t").iterdir()) == []


def test_reading_counts_what_it_skipped(tmp_path):
    log = tmp_path / "l.jsonl"
    log.write_text("\n".join(LINES + ["oops", "[1]"]) + "\n")
    records = read_steplog(str(log))
    assert records.bad_lines == 2 and len(records.steps) == 71 and records.lines == len(LINES) + 2
