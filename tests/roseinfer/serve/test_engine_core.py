"""The engine core's protocol, in-process (gpt2-tiny on CPU, the core's loop on a thread, a real pipe): a request
admitted while others decode gets its first token in an event of its own, sent after the step's prefill and before
the step's decode, so its TTFT does not also hold the running batch's decode step."""

from __future__ import annotations

import threading
from multiprocessing import Pipe

from roseinfer.config import EngineConfig
from roseinfer.sequence import SamplingParams
from roseinfer.serve.engine_core import EngineCore


def _events(conn, until, timeout_s: float = 120.0) -> list[tuple]:
    """Every event the core sent until `until(events)` holds (each send is a list of events)."""
    got: list[tuple] = []
    while not until(got):
        assert conn.poll(timeout_s), "the engine core went silent"
        got += conn.recv()
    return got


def test_a_prefilled_requests_first_token_leaves_before_the_steps_decode():
    server, core_end = Pipe()
    core = EngineCore(core_end, "gpt2-tiny", EngineConfig(max_batch_size=4), metrics=True)
    thread = threading.Thread(target=core.run, daemon=True)
    thread.start()
    try:
        _events(server, lambda ev: ("ready",) in ev)
        params = SamplingParams(max_new_tokens=40, temperature=0.0, ignore_eos=True)
        server.send(("add", 1, "a", [[5, 6, 7, 8]], params, 0))

        def a_decoding(ev):  # request 1 has decode tokens: it is in the running batch
            return any(e[0] == "step" and any(k == 1 and s >= 0 for k, _, _, s in e[1]) for e in ev)

        _events(server, a_decoding)
        server.send(("add", 2, "b", [[9, 10, 11]], params, 0))

        def b_decoding(ev):  # request 2 has a decode token: its prefill's step is over
            return any(e[0] == "step" and any(k == 2 and s >= 0 for k, _, _, s in e[1]) for e in ev)

        events = [e for e in _events(server, b_decoding) if e[0] == "step" and e[1]]
        at = next(i for i, e in enumerate(events) if any(k == 2 for k, *_ in e[1]))
        first = events[at]
        # b's first token (decode step -1: the prefill's) is alone in its event: no decode token rides with it
        assert [s for k, _, _, s in first[1] if k == 2] == [-1]
        assert all(s == -1 for _, _, _, s in first[1]), first
        assert first[2] == []  # finishes come with the step's own event
        # and the same engine step's decode (a's next token and b's second) is the next event
        decode = events[at + 1]
        assert {k for k, _, _, s in decode[1] if s >= 0} == {1, 2}
        server.send(("abort", 1, None, "abort"))
        server.send(("abort", 2, None, "abort"))
        server.send(("stop",))
    finally:
        thread.join(60)
        server.close()
    assert not thread.is_alive()
