"""SLO-triggered capture on the engine core's side (roseinfer/serve/slo_capture.py): the --capture-on language, bad
command lines, and the rate limit, with a real flight recorder fed steps by hand (no timing: the interval is an
hour or zero). The capture of a real server under load, imported by roseprof: tests/roseprof/test_slo_capture.py."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from roseinfer.flight_recorder import FlightRecorder
from roseinfer.serve.slo_capture import CaptureSpec, SloCapture, parse_capture_on
from tests.roseinfer.serve.conftest import REPO, free_port


def test_capture_on_language():
    assert parse_capture_on("itl=2ms") == {"itl": 2_000_000}
    assert parse_capture_on("itl=2.5ms, ttft=500ms,e2e=5s") == {
        "itl": 2_500_000, "ttft": 500_000_000, "e2e": 5_000_000_000,
    }  # fmt: skip
    assert parse_capture_on("itl=250us") == {"itl": 250_000}
    for bad, why in [
        ("itl=2", "is not METRIC=NUMBER UNIT"),
        ("tpot=2ms", "is not METRIC=NUMBER UNIT"),
        ("itl=2ms,itl=3ms", "given twice"),
        ("itl=0ms", "must be above 0"),
        ("", "is not METRIC"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_capture_on(bad)


def _serve(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "roseinfer.serve", "gpt2-tiny", "--port", str(free_port()), *args],
        capture_output=True, text=True, timeout=120, cwd=REPO, env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def test_bad_capture_options_are_one_line_exit_2(tmp_path, capsys):
    """Each refused before any engine is built (in this process: roseinfer.serve.cli.main); once as a user runs it."""
    from roseinfer.serve.cli import main

    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    for args, why in [
        (["--capture-on", "itl=2", "--capture-dir", str(tmp_path)], "'itl=2' is not METRIC=NUMBER UNIT"),
        (["--capture-on", "p99=2ms", "--capture-dir", str(tmp_path)], "is not METRIC=NUMBER UNIT"),
        (["--capture-on", "itl=2ms"], "--capture-on needs --capture-dir"),
        (["--capture-dir", str(tmp_path)], "--capture-dir needs --capture-on"),
        (["--capture-on", "itl=2ms", "--capture-dir", str(not_a_folder)], "cannot be made"),
        (["--capture-on", "itl=2ms", "--capture-dir", str(tmp_path), "--flight-recorder-steps", "10"],
         "the flight recorder keeps 10"),
    ]:  # fmt: skip
        assert main(["gpt2-tiny", "--port", str(free_port()), *args]) == 2, args
        lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
        assert len(lines) == 1 and why in lines[0], (args, lines)
    out = _serve("--capture-on", "itl=2", "--capture-dir", str(tmp_path))
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "'itl=2' is not" in out.stderr, out.stderr


class FakeEngine:
    """Steps written to a real flight recorder, tokens to sequences as the engine appends them."""

    def __init__(self, capture: SloCapture) -> None:
        self.flight = FlightRecorder(1000, {"block_size": 16})
        self.capture = capture
        self.seqs = [
            SimpleNamespace(id=i, request_id=f"cmpl-{i}", arrival_ns=0, token_ns=[], token_step=[], prompt_ids=[1, 2],
                            output_ids=[], preemptions=0, finish_reason=None)
            for i in range(2)
        ]  # fmt: skip
        self.t_ns = 1_000_000

    def prefill(self, took_ns: int = 1_000_000) -> None:
        """Every sequence's first token, from one prefill (the core checks its tokens one by one)."""
        self.t_ns += took_ns
        emitted = []
        for seq in self.seqs:
            seq.output_ids.append(0)
            seq.token_ns.append(self.t_ns)
            seq.token_step.append(-1)
            self.capture.on_prefill_token(seq)
            emitted.append((seq, 0, -1))
        self.capture.after_step(self.flight, lambda: self.seqs, emitted)

    def step(self, gap_ns: int = 1_000_000) -> None:
        """A decode step that took `gap_ns`: its tokens all emitted at its end (the core checks them per step)."""
        index = self.flight.step_index
        start, self.t_ns = self.t_ns, self.t_ns + gap_ns
        self.flight.step(start, self.t_ns, len(self.seqs), 0, 0, self.seqs)
        for seq in self.seqs:
            seq.output_ids.append(0)
            seq.token_ns.append(self.t_ns)
            seq.token_step.append(index)
        self.capture.after_step(self.flight, lambda: self.seqs, [(seq, 0, index) for seq in self.seqs])


def _captures(folder) -> list[list[dict]]:
    files = sorted(folder.glob("*.jsonl"), key=lambda p: int(p.stem.split("-")[-1]))
    assert not list(folder.glob(".*")), "a temporary file was left behind"
    return [[json.loads(line) for line in f.read_text().splitlines()] for f in files]


def test_a_breach_writes_the_steps_around_it_and_the_interval_limits_captures(tmp_path):
    capture = SloCapture(CaptureSpec({"itl": 5_000_000}, str(tmp_path), before=4, after=3, interval_s=3600))
    engine = FakeEngine(capture)
    engine.prefill()
    for k in range(30):
        engine.step(20_000_000 if k in (10, 20, 21) else 1_000_000)  # steps 10, 20 and 21 breach
    capture.close()
    (records,) = _captures(tmp_path)  # one capture: 20 and 21 fell in the hour after the first
    meta = records[0]
    assert meta["type"] == "meta" and meta["flight_recorder_steps"] == 1000
    slo = meta["slo_capture"]
    assert slo["breach_count"] == 2 and {b["request_id"] for b in slo["breaches"]} == {"cmpl-0", "cmpl-1"}
    assert {(b["metric"], b["step"], b["value_ns"]) for b in slo["breaches"]} == {("itl", 10, 20_000_000)}
    steps = [r["index"] for r in records if r["type"] == "step"]
    assert steps == list(range(6, 14))  # 4 before step 10, 3 after
    # the requests of those steps, so the capture names them
    assert {r["request_id"] for r in records if r["type"] == "request"} == {"cmpl-0", "cmpl-1"}


def test_with_no_interval_each_breach_after_a_capture_opens_another(tmp_path):
    capture = SloCapture(CaptureSpec({"itl": 5_000_000}, str(tmp_path), before=2, after=2, interval_s=0))
    engine = FakeEngine(capture)
    engine.prefill()
    for k in range(30):
        engine.step(20_000_000 if k in (10, 11, 20) else 1_000_000)
    capture.close()
    first, second = _captures(tmp_path)
    # 11 came while the first capture waited for its steps after: it joined it
    assert first[0]["slo_capture"]["breach_count"] == 4
    assert {b["step"] for b in first[0]["slo_capture"]["breaches"]} == {10, 11}
    assert [r["index"] for r in second if r["type"] == "step"] == [18, 19, 20, 21, 22]


def test_the_first_decode_token_after_a_prefill_is_checked_on_its_own(tmp_path):
    """A request whose previous token was a prefill's is checked alone, even when the step gap does not breach: a
    prefill of 20 ms between two quick decode steps (the overlapped decode emits the new request's first decode
    token one step later, after the previous step's tokens)."""
    capture = SloCapture(CaptureSpec({"itl": 5_000_000}, str(tmp_path), before=2, after=1, interval_s=0))
    engine = FakeEngine(capture)
    engine.prefill()
    engine.step()
    late = SimpleNamespace(id=7, request_id="cmpl-late", arrival_ns=0, token_ns=[engine.t_ns - 30_000_000],
                           token_step=[-1], prompt_ids=[1], output_ids=[0], preemptions=0, finish_reason=None)  # fmt: skip
    capture.on_prefill_token(late)  # its first token, 30 ms before the step below ends
    engine.seqs.append(late)
    for _ in range(3):
        engine.step()
    capture.close()
    (records,) = _captures(tmp_path)
    (breach,) = records[0]["slo_capture"]["breaches"]
    assert breach["request_id"] == "cmpl-late" and breach["step"] == 1 and breach["value_ns"] == 31_000_000


def test_a_breach_before_any_decode_step_waits_for_one(tmp_path):
    """A step log with no decode step is no run (roseprof refuses it): the capture waits for the steps after."""
    capture = SloCapture(CaptureSpec({"ttft": 5_000_000}, str(tmp_path), before=2, after=1, interval_s=0))
    engine = FakeEngine(capture)
    engine.prefill(10_000_000)
    capture.idle(engine.flight, lambda: engine.seqs)  # idle with no step: nothing written yet
    assert not list(tmp_path.iterdir())
    for _ in range(3):
        engine.step()
    capture.close()
    (records,) = _captures(tmp_path)
    assert [r["index"] for r in records if r["type"] == "step"] == [0, 1]
    assert {b["metric"] for b in records[0]["slo_capture"]["breaches"]} == {"ttft"}


def test_ttft_and_e2e_breaches(tmp_path):
    capture = SloCapture(CaptureSpec({"ttft": 5_000_000, "e2e": 50_000_000}, str(tmp_path), 2, 1, 0))
    engine = FakeEngine(capture)
    engine.prefill(10_000_000)  # the first tokens come at 11 ms: a TTFT breach each
    for _ in range(5):
        engine.step()
    engine.seqs[0].token_ns[-1] = 60_000_000  # made to finish past the e2e limit
    capture.on_finish(engine.seqs[0])
    capture.on_finish(engine.seqs[1])  # 16 ms: none
    capture.idle(engine.flight, lambda: engine.seqs)  # the server went idle: the open capture is written
    capture.close()
    metrics = [
        (b["metric"], b["request_id"]) for c in _captures(tmp_path) for b in c[0]["slo_capture"]["breaches"]
    ]
    assert sorted(metrics) == [("e2e", "cmpl-0"), ("ttft", "cmpl-0"), ("ttft", "cmpl-1")]
