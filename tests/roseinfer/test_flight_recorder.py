"""The flight recorder's ring (the last N steps with the records written before each) and roseprof's reading of
a window that starts mid-run (renumbered from 0, tokens cut to the window)."""

from __future__ import annotations

import json
from types import SimpleNamespace

from roseinfer.flight_recorder import FlightRecorder
from roseprof.workload.steplog import read_steplog


def _seq(i: int) -> SimpleNamespace:
    return SimpleNamespace(id=i)


def _run(recorder: FlightRecorder, steps: int) -> None:
    for k in range(steps):
        recorder.write({"type": "prefill", "start_ns": 100 * k, "end_ns": 100 * k + 10, "batch_size": 1,
                        "tokens": 5, "cow": 0, "requests": [k], "readmitted": []})  # fmt: skip
        recorder.step(
            100 * k + 20, 100 * k + 90, 2, k % 2, 0, [_seq(k), _seq(k + 1)], launched=True, bucket=None
        )


def test_ring_keeps_the_last_n_steps_with_their_records():
    recorder = FlightRecorder(3, {"block_size": 64})
    _run(recorder, 5)
    records = [r for r in recorder.dump() if r["type"] != "gc"]  # a collection may land anywhere
    assert records[0]["type"] == "meta" and records[0]["steps_kept"] == 3 and records[0]["block_size"] == 64
    assert [r["type"] for r in records[1:]] == ["prefill", "step"] * 3
    steps = [r for r in records if r["type"] == "step"]
    assert [s["index"] for s in steps] == [2, 3, 4] and steps[0]["requests"] == [2, 3]
    assert steps[1]["rollovers"] == 1
    last = [r for r in recorder.dump(last=1) if r["type"] != "gc"]
    assert [r["type"] for r in last[1:]] == ["prefill", "step"] and last[2]["index"] == 4
    assert [r for r in recorder.dump(last=0)[1:] if r["type"] != "gc"] == []
    recorder.close()


def test_collections_go_into_the_ring():
    import gc

    recorder = FlightRecorder(4)
    gc.collect()  # a generation-2 collection is always recorded
    _run(recorder, 1)
    records = recorder.dump()
    assert any(r["type"] == "gc" and r["generation"] == 2 for r in records)
    recorder.close()


def test_running_requests_are_dumped_with_copies_of_their_tokens():
    recorder = FlightRecorder(4)
    _run(recorder, 2)
    seq = SimpleNamespace(id=1, arrival_ns=0, prompt_ids=[1, 2], output_ids=[7], token_ns=[50], token_step=[-1],
                          preemptions=0, request_id="cmpl-a", finish_reason=None)  # fmt: skip
    (request,) = [r for r in recorder.dump(running=[seq]) if r["type"] == "request"]
    seq.token_ns.append(99)
    assert (
        request["token_ns"] == [50] and request["request_id"] == "cmpl-a" and request["finish_reason"] is None
    )


def test_a_window_is_read_from_its_first_step(tmp_path):
    recorder = FlightRecorder(2)
    _run(recorder, 4)  # steps 2 and 3 kept
    seq = SimpleNamespace(id=2, arrival_ns=0, prompt_ids=[1], output_ids=[7, 8, 9], token_ns=[15, 190, 290],
                          token_step=[1, 2, 3], preemptions=0, request_id="cmpl-b", finish_reason=None)  # fmt: skip
    path = tmp_path / "steps.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in recorder.dump(running=[seq])))
    log = read_steplog(str(path))
    assert log.meta["first_step"] == 2 and [s["index"] for s in log.steps] == [0, 1]
    (request,) = log.requests
    assert request["token_step"] == [0, 1] and request["token_ns"] == [190, 290]  # step 1's token is older


def test_closing_the_llm_stops_its_recorders_watch_on_collections():
    # A serving engine's flight recorder watches Python's collections (a gc callback, SIGINT held while one runs);
    # an LLM closed takes both back, so that engines made one after another in a process (tests, notebooks) do not
    # pile them up. Its records stay readable.
    import gc

    from roseinfer import LLM, SamplingParams

    callbacks = list(gc.callbacks)
    llm = LLM("gpt2-tiny", flight_recorder_steps=8)
    assert len(gc.callbacks) > len(callbacks)
    llm.generate([[1, 2, 3]], SamplingParams(max_new_tokens=4, ignore_eos=True))
    llm.close()
    llm.close()  # idempotent
    assert gc.callbacks == callbacks
    assert [r["type"] for r in llm.engine.flight.dump()].count(
        "step"
    ) == 3  # the first token is the prefill's
