"""The engine core's cheap bookkeeping keeps every count: a request's inter-token gaps bucketed with one sort (as one
observe a value would), and each token in exactly one "step" event, made as it is emitted (scripts/bench_bookkeeping.py
measures what these cost)."""

from __future__ import annotations

import bisect
import threading
from multiprocessing import Pipe

import numpy as np

from roseinfer.config import EngineConfig
from roseinfer.sequence import SamplingParams
from roseinfer.serve.engine_core import EngineCore
from roseinfer.serve.metrics import SECONDS_BUCKETS, TOKENS_BUCKETS, Histogram


def _one_by_one(bounds, values, request_id):
    """What observe_many must equal: each value in its bucket (`le`), the bucket's largest value its exemplar."""
    counts, largest = [0] * (len(bounds) + 1), [None] * (len(bounds) + 1)
    for v in values.tolist():
        i = bisect.bisect_left(bounds, v)
        counts[i] += 1
        largest[i] = v if largest[i] is None else max(largest[i], v)
    return counts, [None if v is None else (request_id, v) for v in largest]


def test_a_requests_gaps_fall_in_the_buckets_one_observe_each_would_give():
    rng = np.random.default_rng(7)
    # gaps in ns as a request's token times give them: some exactly on a bound (1e-4 s, 2.5e-4 s), some above
    # the last bound, most around a GPU step
    gaps = np.concatenate(
        [
            rng.integers(50_000, 3_000_000, 300),
            [100_000, 250_000, 100_000, 81 * 10**9],
            rng.integers(1, 10, 5),
        ]
    )
    rng.shuffle(gaps)
    values = gaps / 1e9
    h = Histogram("x_seconds", "x", SECONDS_BUCKETS)
    h.observe_many(values, "cmpl-a", at=5.0)
    counts, exemplars = _one_by_one(list(SECONDS_BUCKETS), values, "cmpl-a")
    assert h.counts == counts and sum(h.counts) == values.size
    assert [e and e[:2] for e in h.exemplars] == exemplars
    assert all(e is None or e[2] == 5.0 for e in h.exemplars)
    assert h.sum == float(values.sum())  # the unsorted array's sum: the float it always was
    # a second request adds to the counts and takes over the exemplars of the buckets it falls in
    h.observe_many(np.array([2e-4, 2e-4, 0.5]), "cmpl-b")
    assert h.counts[1] == counts[1] + 2 and h.exemplars[1][:2] == ("cmpl-b", 2e-4)
    assert h.exemplars[0] == (exemplars[0] and (*exemplars[0], 5.0))  # untouched where it has no value


def test_step_values_counted_in_batches_are_what_one_observe_each_gives():
    rng = np.random.default_rng(3)
    steps = (rng.integers(1, 4_000_000, 700) / 1e9).tolist() + [1e-4, 2.5e-4, 90.0]
    one_by_one, batched = Histogram("s", "s", SECONDS_BUCKETS), Histogram("s", "s", SECONDS_BUCKETS)
    for value in steps:
        one_by_one.observe(value)
    batched.observe_each(steps[:300])
    batched.observe_each(steps[300:])
    assert (
        batched.counts == one_by_one.counts and batched.sum == one_by_one.sum
    )  # the same float, bit for bit
    tokens = [int(t) for t in rng.integers(0, 9000, 500)] + [1, 64, 8192]
    one_by_one, batched = Histogram("t", "t", TOKENS_BUCKETS), Histogram("t", "t", TOKENS_BUCKETS)
    for value in tokens:
        one_by_one.observe(value)
    batched.observe_each(tokens)
    assert batched.counts == one_by_one.counts and batched.sum == one_by_one.sum


def _events_until_finished(conn, n: int, timeout_s: float = 120.0) -> list[tuple]:
    got: list[tuple] = []
    while sum(len(e[2]) for e in got if e[0] == "step") < n:
        assert conn.poll(timeout_s), "the engine core went silent"
        got += conn.recv()
    return got


def test_every_token_is_in_one_step_event_in_order_and_counted():
    server, core_end = Pipe()
    core = EngineCore(
        core_end, "gpt2-tiny", EngineConfig(max_batch_size=4, prefill_max_batch_size=2), metrics=True
    )
    thread = threading.Thread(target=core.run, daemon=True)
    thread.start()
    lengths = {1: 9, 2: 5, 3: 12, 4: 1, 5: 7}  # five requests, four at a time: admissions while others decode
    try:
        assert conn_ready(server)
        for key, n in lengths.items():
            params = SamplingParams(max_new_tokens=n, ignore_eos=True)
            server.send(("add", key, f"cmpl-{key}", [[3 + key] * (2 + key)], params, 0))
        events = [e for e in _events_until_finished(server, len(lengths)) if e[0] == "step"]
        server.send(("query", 1, "metrics"))
        (reply,) = _events_until(server, lambda e: e[0] == "reply")
        server.send(("stop",))
    finally:
        thread.join(60)
        server.close()
    assert not thread.is_alive()
    tokens: dict[int, list[tuple[int, int]]] = {key: [] for key in lengths}
    finished: list[int] = []
    for _, toks, finishes, _, _ in events:
        for key, index, token, step in toks:
            assert index == 0
            tokens[key].append((token, step))
        finished += [key for key, _, reason in finishes if reason == "length"]
    assert sorted(finished) == sorted(lengths)
    for key, n in lengths.items():
        steps = [s for _, s in tokens[key]]
        assert len(steps) == n and steps[0] == -1  # the prefill's token first, then one a decode step
        assert all(b > a >= 0 for a, b in zip(steps[1:], steps[2:]))
    # a prefill's tokens leave in an event of their own, before the same step's decode tokens
    for _, toks, _, _, _ in events:
        assert len({s == -1 for *_, s in toks}) <= 1
    snapshot = reply[2]
    assert snapshot["generation_tokens"] == sum(lengths.values())
    assert snapshot["prompt_tokens"] == sum(2 + key for key in lengths)
    assert sum(snapshot["finished"].values()) == len(lengths)
    itl_counts = snapshot["histograms"]["roseinfer:inter_token_latency_seconds"][1][1]
    assert sum(itl_counts) == sum(n - 1 for n in lengths.values())
    # every step so far in the per-step histograms (counted in batches; a snapshot counts what is pending)
    _, iteration_counts, iteration_sum, _ = snapshot["histograms"]["roseinfer:iteration_tokens_total"][1]
    step_counts = snapshot["histograms"]["roseinfer:decode_step_seconds"][1][1]
    assert sum(step_counts) == sum(iteration_counts) >= max(lengths.values())
    assert iteration_sum == sum(lengths.values()) + sum(2 + key for key in lengths)


def conn_ready(conn, timeout_s: float = 120.0) -> bool:
    return bool(_events_until(conn, lambda e: e == ("ready",), timeout_s))


def _events_until(conn, match, timeout_s: float = 120.0) -> list[tuple]:
    while True:
        assert conn.poll(timeout_s), "the engine core went silent"
        hits = [e for e in conn.recv() if match(e)]
        if hits:
            return hits
