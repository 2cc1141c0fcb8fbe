"""The scheduler under load: a stream of requests arriving over time, none lost, all blocks returned."""

import dataclasses
import random

import pytest

from roseinfer import SamplingParams
from roseinfer.config import EngineConfig
from roseinfer.engine import Engine


def test_stream_of_500_requests_loses_none(tiny_checkpoint):
    rng = random.Random(0)
    # A small pool and batch so admission control and preemption both happen.
    engine = Engine(
        tiny_checkpoint,
        EngineConfig(max_batch_size=24, prefill_max_batch_size=6, num_blocks=10, block_size=16),
    )
    submitted, finished = {}, {}
    pending = 500
    while pending or engine.has_unfinished():
        for _ in range(rng.randint(0, 4) if pending else 0):
            prompt = [rng.randrange(500) for _ in range(rng.randint(1, 40))]
            params = SamplingParams(max_new_tokens=rng.randint(1, 48), ignore_eos=rng.random() < 0.5)
            seq = engine.add_request(prompt, params)
            submitted[seq.id] = seq
            pending -= 1
            if not pending:
                break
        for seq in engine.step():
            assert seq.id not in finished
            finished[seq.id] = seq
    assert set(finished) == set(submitted) and len(finished) == 500
    for seq in finished.values():
        n = len(seq.output_ids)
        assert 1 <= n <= seq.params.max_new_tokens
        assert n == seq.params.max_new_tokens or seq.finish_reason == "stop"
        assert len(seq.token_ns) == n and seq.token_ns == sorted(seq.token_ns)
    mgr = engine.mgr
    assert mgr.num_free() == mgr.num_blocks
    assert int(mgr.refcount.sum()) == 0
    assert engine.stats["preemptions"] > 0


def test_fifo_admission_order():
    engine = Engine("gpt2-tiny", EngineConfig(max_batch_size=2, prefill_max_batch_size=1))
    seqs = [
        engine.add_request([i + 1] * 3, SamplingParams(max_new_tokens=2, ignore_eos=True)) for i in range(5)
    ]
    first_token = {}
    while engine.has_unfinished():
        engine.step()
        for s in seqs:
            if s.token_ns and s.id not in first_token:
                first_token[s.id] = s.token_ns[0]
    order = sorted(first_token, key=first_token.get)
    assert order == [s.id for s in seqs]


def test_stop_on_eos_unless_ignored():
    engine = Engine("gpt2-tiny", EngineConfig())
    probe = engine.add_request([7, 8, 9], SamplingParams(max_new_tokens=1))
    while engine.has_unfinished():
        engine.step()
    first = probe.output_ids[0]
    # Pretend the model's first greedy token is the end-of-sequence token.
    engine.model_cfg = type(engine.model_cfg)(**{**engine.model_cfg.__dict__, "eos_token_id": first})
    stopped = engine.add_request([7, 8, 9], SamplingParams(max_new_tokens=10))
    ignored = engine.add_request([7, 8, 9], SamplingParams(max_new_tokens=10, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    assert stopped.output_ids == [first] and stopped.finish_reason == "stop"
    assert len(ignored.output_ids) == 10 and ignored.finish_reason == "length"


@pytest.mark.parametrize("path", ["eager", "static"])
def test_decode_checks_read_off_a_batch_count_match_a_full_count(monkeypatch, tiny_checkpoint, path):
    # The scheduler counts the running batch's room in its blocks and the tokens its sequences have left once a
    # batch, and reads them off the first sequence's progress after (`Scheduler._count`). Under a stream with
    # preemption, EOS, aborts, sampled requests, shared prompts and admissions, every call agrees with a count over
    # the batch (the blocks the next step needs, the fewest tokens left), and many calls read off (not counted
    # again); every `can_follow` answers as a look at every sequence does, and no batch with a sampled request takes
    # the overlapped path (its greedy check is also made once a batch).
    from roseinfer.decode_paths import DecodePaths
    from roseinfer.scheduler import Scheduler

    rng = random.Random(1)
    engine = Engine(
        tiny_checkpoint,
        EngineConfig(max_batch_size=12, prefill_max_batch_size=3, num_blocks=40, block_size=8),
    )
    if path == "static":
        engine.use_static_decode(capture=False)
    # An end-of-sequence token the model emits now and then (the commonest of a probe's), so that some requests stop
    # early.
    probe = engine.add_request([3, 1, 4], SamplingParams(max_new_tokens=30, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
    eos = max(set(probe.output_ids), key=probe.output_ids.count)
    engine.model_cfg = dataclasses.replace(engine.model_cfg, eos_token_id=eos)
    blocks_needed, tokens_left, count_rooms = (
        Scheduler._blocks_needed,
        Scheduler._tokens_left,
        Scheduler._count_rooms,
    )
    calls = counted = read_off = 0  # checks, counts of the rooms, blocks needed read off without a count

    def counting(sched, c):
        nonlocal counted
        counted += 1
        count_rooms(sched, c)

    def needed_checked(sched):
        nonlocal calls, read_off
        before = counted
        needed, running = blocks_needed(sched), sched.running
        assert needed == len(sched.mgr.starting_a_block(running))
        calls += 1
        read_off += counted == before
        return needed

    def left_checked(sched):
        nonlocal calls
        left, running = tokens_left(sched), sched.running
        assert left == min(s.params.max_new_tokens - len(s.output_ids) for s in running)
        calls += 1
        return left

    can_follow = Scheduler.can_follow

    def follow_checked(sched, in_flight):
        # what can_follow answered before the batch counts: every sequence looked at
        running, mgr = sched.running, sched.mgr
        full = (
            running == in_flight
            and not (sched.waiting and len(running) < sched.cfg.max_batch_size)
            and not any(len(s.output_ids) + 1 >= s.params.max_new_tokens for s in running)
            and len(mgr.starting_a_block(running)) <= mgr.num_free()
        )
        assert can_follow(sched, in_flight) == full
        return full

    overlapped = DecodePaths._decode_overlapped

    def greedy_checked(runner, seqs):
        assert all(s.params.temperature == 0 for s in seqs), "a sampled request on the overlapped path"
        return overlapped(runner, seqs)

    monkeypatch.setattr(Scheduler, "_count_rooms", counting)
    monkeypatch.setattr(Scheduler, "_blocks_needed", needed_checked)
    monkeypatch.setattr(Scheduler, "_tokens_left", left_checked)
    monkeypatch.setattr(Scheduler, "can_follow", follow_checked)
    monkeypatch.setattr(DecodePaths, "_decode_overlapped", greedy_checked)
    pending, finished, step = 80, [], 0
    while pending or engine.has_unfinished():
        # Bursts of arrivals between runs of steps of one batch (what the batch counts are for), a burst's prompts
        # of one length: mostly whole blocks, the batch then at its blocks' edges in the same step.
        # Half the bursts one prompt for all (prefix-cache hits, copy-on-write of a shared partly filled block).
        length = rng.choice([8, 16, 24, rng.randint(1, 30)])
        shared = [rng.randrange(500) for _ in range(length)] if rng.random() < 0.5 else None
        for _ in range(min(pending, rng.randint(0, 8)) if step % 16 == 0 else 0):
            prompt = shared or [rng.randrange(500) for _ in range(length)]
            sampled = path == "static" and rng.random() < 0.1
            params = SamplingParams(
                max_new_tokens=rng.randint(1, 90), ignore_eos=rng.random() < 0.8, temperature=0.8 * sampled
            )
            engine.add_request(prompt, params)
            pending -= 1
        finished += engine.step()
        step += 1
        if engine.scheduler.running and rng.random() < 0.01:
            engine.abort(rng.choice(engine.scheduler.running))
    reasons = {s.finish_reason for s in finished}
    assert {"stop", "length"} <= reasons and engine.stats["preemptions"] > 0
    assert engine.stats["prefix_hit_blocks"] > 0 and engine.stats["cow"] > 0
    assert calls > 500 and read_off > 50  # the read-off path exercised (about a fifth of the calls here)


@pytest.mark.parametrize("path", ["eager", "static"])
@pytest.mark.parametrize("prompts", ["staggered", "lockstep"])
def test_decode_checks_pass_over_the_batch_less_than_before(path, prompts):
    # Before the batch counts, the decode checks passed over every running sequence once a step on the eager path
    # (the blocks needed) and three times on the static one (also the tokens left, and the blocks again in
    # can_follow). Counted in passes (a look at which sequences start a block is one, a count of the rooms about
    # two): sequences at staggered offsets in their blocks (one at an edge nearly every step) stay within a fifth of
    # one a step, a batch in lock-step well under one, the static path under one.
    block = 8
    engine = Engine("gpt2-tiny", EngineConfig(max_batch_size=32, prefill_max_batch_size=32, block_size=block))
    if path == "static":
        engine.use_static_decode(capture=False)
    rooms = looks = steps = 0
    count_rooms, starting_a_block = engine.scheduler._count_rooms, engine.mgr.starting_a_block

    def counted(c):
        nonlocal rooms
        rooms += 1
        count_rooms(c)

    def looked(seqs):
        nonlocal looks
        looks += 1
        return starting_a_block(seqs)

    engine.scheduler._count_rooms, engine.mgr.starting_a_block = counted, looked
    for i in range(32):
        prompt = [5] * (1 + i if prompts == "staggered" else 4)
        engine.add_request(prompt, SamplingParams(max_new_tokens=8 * block, ignore_eos=True))
    while engine.has_unfinished():
        engine.step()
        steps += 1
    passes = looks + 2 * rooms
    assert steps >= 8 * block - 1  # a step a token but the prefill's
    assert passes <= 1.2 * steps if path == "eager" else passes <= steps
    if prompts == "lockstep":
        assert looks == 0 and passes <= 0.6 * steps
