"""The HTTP path of a `roseprof live` run (roseprof/live/path.http_path) on step-log records built here, no server:
where the path is split (a server sharing this host's clock), the engine part's queue, step wait and prefill, and
which of a request's prefills its engine TTFT is (one older than the window, a preempted request's readmission)."""

from __future__ import annotations

import pytest


def test_the_path_is_split_only_where_the_server_shares_this_hosts_clock():
    from roseprof.live.path import http_path, on_this_host
    from roseprof.workload.steplog import StepLogRecords

    assert (
        on_this_host("http://127.0.0.1:8000")
        and on_this_host("localhost:9")
        and on_this_host("http://[::1]:80")
    )
    assert not on_this_host("http://10.1.2.3:8000")
    log = StepLogRecords(meta={"first_step": 0})
    assert http_path(log, [], 1, "http://10.1.2.3:8000") is None  # another host: another clock
    assert http_path(log, [], None, "http://127.0.0.1:8000") is None  # a load without its monotonic start


def test_the_engine_part_says_which_requests_met_a_running_step():
    """A request arriving during a decode step waits for its end before its prefill; one arriving to an idle engine
    does not: the split tells the two apart (the engine's own records, as a flight-recorder dump gives them)."""
    from roseprof.live.path import http_path
    from roseprof.workload.steplog import StepLogRecords

    ms = 1_000_000
    log = StepLogRecords(
        meta={"first_step": 0},
        steps=[{"index": 0, "start_ns": 10 * ms, "end_ns": 14 * ms}],
        prefills=[
            {"start_ns": 2 * ms, "end_ns": 3 * ms, "requests": [1], "readmitted": []},
            {"start_ns": 14 * ms, "end_ns": 15 * ms, "requests": [2], "readmitted": []},
        ],
        requests=[
            # arrived at 1 ms, idle engine: prefill at 2 ms, first token at 3 ms
            {"id": 1, "request_id": "a", "arrival_ns": 1 * ms, "token_ns": [3 * ms], "token_step": [-1]},
            # arrived at 11 ms, inside step 0 (10-14 ms): waits 3 ms for it, prefill at 14 ms, token at 15 ms
            {"id": 2, "request_id": "b", "arrival_ns": 11 * ms, "token_ns": [15 * ms], "token_step": [-1]},
        ],
    )
    rows = [
        {"request_id": "a", "sent_ms": 0.5, "t_ms": [3.5], "steps": [-1]},
        {"request_id": "b", "sent_ms": 10.5, "t_ms": [15.5], "steps": [-1]},
    ]
    path = http_path(log, rows, 0, "http://127.0.0.1:8000")
    assert path["busy_at_arrival"] == 0.5
    assert path["step_wait_ms"]["p50"] == pytest.approx(
        3.0
    )  # only the request that met a step waited for one
    assert path["queue_ms"]["p50"] == pytest.approx(2.0)  # queues of 1 ms (idle) and 3 ms (the step): p50 2
    assert path["prefill_ms"]["p50"] == path["prefill_ms"]["p99"] == pytest.approx(1.0)  # both prefills 1 ms


def test_a_request_whose_prefill_is_older_than_the_window_has_no_engine_ttft():
    """The server's window cut the request's prefill token (its prefill ran before the window's first step): its
    engine TTFT and first delivery are unknown, not its arrival to the first token the window holds (a p99 of
    724 ms beside a client TTFT p99 of 54 ms)."""
    from roseprof.live.path import http_path
    from roseprof.workload.steplog import StepLogRecords

    ms = 1_000_000
    log = StepLogRecords(
        meta={"first_step": 100},
        steps=[{"index": 0, "start_ns": 500 * ms, "end_ns": 510 * ms}],
        prefills=[{"start_ns": 20 * ms, "end_ns": 21 * ms, "requests": [2], "readmitted": []}],
        requests=[
            # prefilled before the window: only its token of step 100 (the window's step 0) is left
            {"id": 1, "request_id": "a", "arrival_ns": 1 * ms, "token_ns": [510 * ms], "token_step": [0]},
            {
                "id": 2,
                "request_id": "b",
                "arrival_ns": 19 * ms,
                "token_ns": [21 * ms, 510 * ms],
                "token_step": [-1, 0],
            },
        ],
    )
    rows = [
        {"request_id": "a", "sent_ms": 0.5, "t_ms": [5.5, 511.0], "steps": [-1, 100]},
        {"request_id": "b", "sent_ms": 18.5, "t_ms": [22.0, 511.0], "steps": [-1, 100]},
    ]
    path = http_path(log, rows, 0, "http://127.0.0.1:8000")
    assert path["requests"] == 2  # both reached the server: their HTTP in is known
    assert path["engine_ttft_ms"]["p99"] == pytest.approx(2.0)  # b's alone: 19 ms -> 21 ms
    assert path["first_delivery_ms"]["p99"] == pytest.approx(1.0)


def test_a_preempted_requests_engine_ttft_is_its_first_prefills():
    """A preempted request is prefilled again: its second -1 token is a readmission's. The engine TTFT is the
    first prefill's token (2 ms), never the readmission's (it read 581 ms, and its first delivery -578 ms), and each
    client token pairs with the server's emission of the same occurrence."""
    from roseprof.live.path import http_path
    from roseprof.workload.steplog import StepLogRecords

    ms = 1_000_000
    log = StepLogRecords(
        meta={"first_step": 100},
        steps=[
            {"index": 0, "start_ns": 500 * ms, "end_ns": 510 * ms},
            {"index": 1, "start_ns": 690 * ms, "end_ns": 700 * ms},
        ],
        prefills=[
            {"start_ns": 20 * ms, "end_ns": 21 * ms, "requests": [1], "readmitted": []},
            {"start_ns": 590 * ms, "end_ns": 600 * ms, "requests": [1], "readmitted": [1]},
        ],
        requests=[
            {
                "id": 1,
                "request_id": "a",
                "arrival_ns": 19 * ms,
                "token_ns": [21 * ms, 510 * ms, 600 * ms, 700 * ms],
                "token_step": [-1, 0, -1, 1],
            },
        ],
    )
    rows = [
        {"request_id": "a", "sent_ms": 18.5, "t_ms": [22.0, 511.0, 601.0, 701.0], "steps": [-1, 100, -1, 101]}
    ]
    path = http_path(log, rows, 0, "http://127.0.0.1:8000")
    assert path["engine_ttft_ms"]["p99"] == pytest.approx(2.0)
    assert path["first_delivery_ms"]["p99"] == pytest.approx(1.0)
    assert path["tokens"] == 4 and path["delivery_ms"]["p99"] == pytest.approx(
        1.0
    )  # each token 1 ms after its emission


def test_a_readmissions_token_pairs_with_the_readmission_whatever_the_first_tokens_step():
    """The client's first token may carry no step (a chunk without token_steps): it is still the first prefill's,
    and the readmission's -1 pairs with the readmission's emission, not the first prefill's (568 ms off). In a log
    whose prefills name no request, a first -1 emitted after the client had its first token is no first prefill."""
    from roseprof.live.path import http_path
    from roseprof.workload.steplog import StepLogRecords

    ms = 1_000_000

    def log_of(prefills, token_ns, token_step):
        return StepLogRecords(
            meta={"first_step": 100},
            steps=[{"index": 0, "start_ns": 500 * ms, "end_ns": 510 * ms}],
            prefills=prefills,
            requests=[{"id": 1, "request_id": "a", "arrival_ns": 19 * ms, "token_ns": token_ns, "token_step": token_step}],
        )  # fmt: skip

    named = [
        {"start_ns": 20 * ms, "end_ns": 21 * ms, "requests": [1], "readmitted": []},
        {"start_ns": 590 * ms, "end_ns": 600 * ms, "requests": [1], "readmitted": [1]},
    ]
    log = log_of(named, [21 * ms, 510 * ms, 600 * ms, 700 * ms], [-1, 0, -1, 1])
    rows = [
        {
            "request_id": "a",
            "sent_ms": 18.5,
            "t_ms": [22.0, 511.0, 601.0, 701.0],
            "steps": [None, 100, -1, 101],
        }
    ]
    path = http_path(log, rows, 0, "http://127.0.0.1:8000")
    assert path["tokens"] == 4 and path["delivery_ms"]["p99"] == pytest.approx(1.0)
    # no prefill records that name requests, the first prefill cut from the window, its readmission in it
    log = log_of(
        [], [600 * ms, 700 * ms], [-1, 1]
    )  # the window starts after step 100: its first -1 is at 600 ms
    rows = [
        {"request_id": "a", "sent_ms": 18.5, "t_ms": [22.0, 511.0, 601.0, 701.0], "steps": [-1, 100, -1, 101]}
    ]
    path = http_path(log, rows, 0, "http://127.0.0.1:8000")
    assert path["engine_ttft_ms"]["p99"] is None and path["first_delivery_ms"]["p99"] is None
