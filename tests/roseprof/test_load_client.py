"""The load's plan and client in process, beside test_load.py's subprocesses: the seeded schedule and lengths, the
options' parsing, a piped load's event loop (no live figures), and the stream reader's end of stream."""

from __future__ import annotations

import json

import pytest

from roseprof.load.schedule import Length, Plan, parse_length, read_dataset
from roseprof.load.serving import parse_slo
from tests.roseprof import test_load

stub = test_load.stub  # the fixture: the stub server on a free port


def test_the_same_seed_gives_the_same_schedule_and_lengths():
    plan = Plan(seed=7, requests=50, rate=10.0, arrivals="gamma", burstiness=0.5,
                prompt_len=Length(4, 40), output_len=Length(8, 64))  # fmt: skip
    a, b = list(plan.schedule()), list(plan.schedule())
    assert a == b
    other = list(Plan(seed=8, requests=50, rate=10.0, prompt_len=Length(4, 40)).schedule())
    assert [p.at_s for p in other] != [p.at_s for p in a]
    assert {len(p.prompt) for p in a} != {len(a[0].prompt)}  # uniform lengths vary
    assert all(4 <= len(p.prompt) <= 40 and 8 <= p.max_tokens <= 64 for p in a)
    # the lengths do not depend on the rate
    slower = list(Plan(seed=7, requests=50, rate=1.0, arrivals="gamma", burstiness=0.5,
                       prompt_len=Length(4, 40), output_len=Length(8, 64)).schedule())  # fmt: skip
    assert [p.max_tokens for p in slower] == [p.max_tokens for p in a]
    # Poisson at 10 req/s: the mean gap is near 0.1 s over many requests
    many = [p.at_s for p in Plan(seed=1, requests=4000, rate=10.0).schedule()]
    assert 0.09 < many[-1] / len(many) < 0.11


def test_lengths_slo_and_dataset_parse(tmp_path):
    assert parse_length("16", "x") == Length(16, 16) and parse_length("8-32", "x") == Length(8, 32)
    assert parse_slo("ttft=200ms,tpot=5ms,e2e=2s") == {"ttft_ms": 200.0, "tpot_ms": 5.0, "e2e_ms": 2000.0}
    data = tmp_path / "p.jsonl"
    data.write_text('{"prompt": "hello", "output_len": 5}\n\n{"prompt": "world"}\n')
    assert read_dataset(str(data)) == (("hello", 5), ("world", None))


def test_a_piped_load_computes_no_live_figures_while_it_measures(stub, monkeypatch):
    """Off a terminal the progress display is off, and the load's event loop runs nothing it does not need: the
    live figures (numpy percentiles, whose first call imports for tens of ms) stalled every stream in flight."""
    import asyncio
    import io

    from roseprof.load import runner
    from roseprof.load.client import parse_url
    from roseprof.render.load_progress import LoadProgress

    assert LoadProgress(stream=io.StringIO()).callback() is None  # piped: no display, no callback

    def no_live(self):
        raise AssertionError("live figures computed during a load nobody watches")

    monkeypatch.setattr(runner.LoadState, "live", no_live)
    state = runner.LoadState()
    plan = Plan(seed=0, requests=4, concurrency=2, prompt_len=Length(4, 4), output_len=Length(8, 8))
    asyncio.run(
        runner.run(parse_url(stub("--token-delay-ms", "200")), plan, runner.LoadOptions(), state, None)
    )
    assert [r.status for r in state.done()] == ["ok"] * 4


def _events_read(pieces: list[bytes], chunked: bool):
    """A response body fed to the client's reader piece by piece (each piece one read), read into a record."""
    import asyncio

    from roseprof.load.client import Record, StreamError, _read_events

    async def go():
        reader = asyncio.StreamReader()
        for piece in pieces:
            reader.feed_data(piece)
        reader.feed_eof()
        rec = Record(index=0, prompt_len=None, max_tokens=4)
        try:
            await _read_events(reader, chunked, rec, stall_s=5)
        except StreamError as e:
            return rec, e.kind
        return rec, None

    return asyncio.run(go())


def _sse(chunk: dict) -> bytes:
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def _chunked(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


@pytest.mark.parametrize("chunked", [False, True])
def test_a_token_whose_text_is_done_does_not_end_the_stream(chunked):
    """The reader stops at the `data: [DONE]` line, never at a token that reads "[DONE]" (its JSON text): every
    token of the stream is kept, and a stream cut before its [DONE] is a broken stream with the tokens it got."""
    events = [_sse({"id": "r1", "choices": [{"text": t}]}) for t in ("a", "[DONE]", "data: [DONE]", "b")]
    done = b"data: [DONE]\n\n"
    wrap = _chunked if chunked else (lambda b: b)
    pieces = [wrap(e) for e in events] + [wrap(done)] + ([b"0\r\n\r\n"] if chunked else [])
    rec, error = _events_read(pieces, chunked)
    assert error is None and len(rec.times) == 4 and rec.request_id == "r1"
    # the same stream cut after two tokens: a broken stream that keeps them
    rec, error = _events_read(pieces[:2], chunked)
    assert error == "broken_stream" and len(rec.times) == 2
