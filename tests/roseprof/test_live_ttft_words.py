"""A slow request's TTFT in `roseprof live`'s words: queued, its prefill, and the rest, the HTTP path both ways,
named where it is a large part (on the H200 the first requests of a load read every token ~100 ms after the engine
made them, and the words said only "queued 5.7 ms, then a 112-token prefill (7.5 ms)"; docs/BENCHMARKS.md session
23)."""

from __future__ import annotations

from roseprof.live.join import Explainer
from roseprof.workload.steplog import StepLogRecords

MS = 1_000_000


def _ttft(client_ttft_ms: float) -> dict:
    """One request that arrived at 0, waited 5 ms, was prefilled in 7 ms with one other, as the client saw it."""
    log = StepLogRecords(
        meta={"version": 4},
        prefills=[{"start_ns": 5 * MS, "end_ns": 12 * MS, "tokens": 112, "requests": [1, 2]}],
    )
    row = {
        "request_id": "cmpl-a",
        "sent_ms": 0.0,
        "t_ms": [client_ttft_ms, client_ttft_ms + 1],
        "steps": [-1, 0],
    }
    record = {"id": 1, "request_id": "cmpl-a", "arrival_ns": 0}
    return Explainer(log, 0).ttft(row, record)


def test_a_ttft_mostly_outside_the_engine_says_so_and_is_blamed_on_it():
    entry = _ttft(99.8)
    assert entry["cause"] == "http"
    assert "queued 5.0 ms, then a 112-token prefill with 1 other request(s) (7.0 ms)" in entry["line"]
    assert "87.8 ms more on the HTTP path" in entry["line"]


def test_a_ttft_the_engine_explains_names_no_http_path():
    entry = _ttft(13.0)
    assert entry["cause"] == "prefill"
    assert "HTTP path" not in entry["line"]
