"""Rollover blocks reserved ahead (`roseinfer.decode_slots`) on the static decode path (what CUDA graphs replay),
run eagerly on CPU: the same tokens and KV contents as the eager path, which allocates every block in the step
that starts it, and no allocation in a step that starts blocks."""

import math

import numpy as np
import pytest
import torch

from roseinfer import LLM, SamplingParams
from tests.roseinfer.test_engine_matches_hf import make_prompts

BLOCK = 16


def static_llm(**kw) -> LLM:
    llm = LLM("gpt2-tiny", block_size=BLOCK, **kw)
    llm.engine.use_static_decode(capture=False)
    return llm


def kv_of(engine, seq, tokens: int) -> list[torch.Tensor]:
    """Per layer, the keys and values of the sequence's first `tokens` cached tokens read through its blocks:
    [2, T, H, D]."""
    cache, pos = engine.kv_cache, np.arange(tokens)
    out = []
    for layer in range(cache.num_layers):
        blocks = torch.as_tensor(np.asarray(seq.block_ids)[pos // BLOCK])
        slots = torch.as_tensor(pos % BLOCK)
        out.append(
            torch.stack([cache.k_caches[layer][blocks, :, slots], cache.v_caches[layer][blocks, :, slots]])
        )
    return out


def test_blocks_ahead_give_the_eager_paths_tokens_and_kv_every_step():
    # Prompts of many lengths (sequences start blocks in different steps), shared prefixes (prefix-cache hits, a
    # copy-on-write) and two equal one-token prompts (lock-step rollovers); admission one request per step. The
    # static engine runs a step ahead of its tokens (the overlapped decode), so the KV is compared over the
    # tokens both have cached.
    prompts = [p[:80] for p in make_prompts()] + [[7], [7]]
    params = SamplingParams(max_new_tokens=70, ignore_eos=True)
    static = static_llm(max_batch_size=6, prefill_max_batch_size=1).engine
    eager = LLM("gpt2-tiny", block_size=BLOCK, max_batch_size=6, prefill_max_batch_size=1).engine
    engines = [static, eager]
    seqs = [[e.add_request(p, params) for p in prompts] for e in engines]
    held_ahead = 0
    while any(e.has_unfinished() for e in engines):
        for e in engines:
            if e.has_unfinished():
                e.step()
        for a, b in zip(*seqs):
            n = min(len(a.output_ids), len(b.output_ids))
            assert a.output_ids[:n] == b.output_ids[:n]
            if a.block_ids and b.block_ids:
                tokens = min(a.num_cached, b.num_cached)
                # Not bit-equal: the static path pads its batch to a bucket, so its matmuls have other shapes.
                for ka, kb in zip(kv_of(static, a, tokens), kv_of(eager, b, tokens)):
                    torch.testing.assert_close(ka, kb, atol=1e-5, rtol=1e-5)
            if a.block_ids:
                # Blocks held beyond what the cached tokens (and the token being written) need: one at most.
                spare = len(a.block_ids) - math.ceil((a.num_cached + 1) / BLOCK)
                assert spare <= 1
                held_ahead += spare == 1
    assert [a.output_ids for a in seqs[0]] == [b.output_ids for b in seqs[1]]
    assert held_ahead > 0
    for key in ("rollovers", "cow", "prefix_hit_blocks", "decode_steps", "decode_kv_tokens"):
        assert static.stats[key] == eager.stats[key], key
    assert static.stats["cow"] > 0 and static.stats["rollovers"] > 0
    for e in engines:
        assert e.mgr.num_free() == e.mgr.num_blocks and int(e.mgr.refcount.sum()) == 0


def blocks_allocated_per_step(llm: LLM, batch: int, new_tokens: int) -> tuple[dict[int, int], set[int]]:
    """Blocks allocated for decoding in each decode step of a lock-step batch (equal one-token prompts), and the
    steps that started blocks."""
    engine, mgr = llm.engine, llm.engine.mgr
    per_step: dict[int, int] = {}
    append_blocks = mgr.append_blocks  # every block the static path adds to a sequence goes through it

    def counting(seqs):
        per_step[engine.decode_steps] = per_step.get(engine.decode_steps, 0) + len(seqs)
        return append_blocks(seqs)

    mgr.append_blocks = counting
    llm.generate([[5]] * batch, SamplingParams(max_new_tokens=new_tokens, ignore_eos=True))
    return per_step, engine.rollover_steps


def test_no_block_is_allocated_in_a_step_that_starts_blocks():
    # A lock-step batch (equal one-token prompts) starts a block in every sequence at tokens 16, 32, 48 and 64:
    # none of those steps allocates; a few sequences per step before them do (the batch over a quarter block),
    # as many blocks in all as the eager path allocates in those steps.
    batch = 16
    new, roll_new = blocks_allocated_per_step(static_llm(max_batch_size=batch), batch, 70)
    assert len(roll_new) == 4
    assert not any(new.get(s) for s in roll_new)
    budget = math.ceil(batch / (BLOCK // 4))
    assert max(new.values()) == budget and sum(new.values()) == batch * len(roll_new)


def many_prompts(llm: LLM) -> list[list[int]]:
    """Prompts of many lengths (admissions one a step, finishes, prefix hits) generated at once: their tokens."""
    prompts = [p[:80] for p in make_prompts()] + [[7], [7], [9] * 40]
    return [o.token_ids for o in llm.generate(prompts, SamplingParams(max_new_tokens=90, ignore_eos=True))]


def admitted_mid_count(llm: LLM) -> list[list[int]]:
    """One sequence decodes alone (its quiet steps counted ahead); a second, admitted in its fourth step with 6
    free slots in its last block, has a block due at once: the count must not outlive the batch. Their tokens."""
    engine, params = llm.engine, SamplingParams(max_new_tokens=40, ignore_eos=True)
    seqs = [engine.add_request([7], params)]
    step = 0
    while engine.has_unfinished():
        if step == 3:
            seqs.append(engine.add_request(list(range(100, 110)), params))
        engine.step()
        step += 1
    return [s.output_ids for s in seqs]


def slot_history(monkeypatch, quiet: bool, workload) -> tuple[list, list[list[int]], int]:
    """Every `reserve` and `reserve_ahead` of a static engine running `workload` as (what it returned, the block
    lists, the fill counts, the host tables) after each call; the tokens; and how many `reserve` calls took the
    quiet path. quiet=False: the full path every step."""
    from roseinfer.decode_slots import DecodeSlots

    if not quiet:
        monkeypatch.setattr(DecodeSlots, "_quiet_steps", lambda self, past, room: 0)
    history, quiet_steps = [], 0
    reserve, reserve_ahead = DecodeSlots.reserve, DecodeSlots.reserve_ahead

    def record(slots, seqs, result):
        tables = slots.tables.host_np[: len(seqs)].copy()
        history.append((result, [list(s.block_ids) for s in seqs], slots.mgr.fill.copy(), tables))

    def reserve_recorded(slots, seqs, rows):
        nonlocal quiet_steps
        result = reserve(slots, seqs, rows)
        quiet_steps += slots.quiet_step
        record(slots, seqs, result)
        return result

    def reserve_ahead_recorded(slots, seqs):
        reserve_ahead(slots, seqs)
        record(slots, seqs, None)

    monkeypatch.setattr(DecodeSlots, "reserve", reserve_recorded)
    monkeypatch.setattr(DecodeSlots, "reserve_ahead", reserve_ahead_recorded)
    tokens = workload(static_llm(max_batch_size=4, prefill_max_batch_size=1))
    monkeypatch.undo()
    return history, tokens, quiet_steps


@pytest.mark.parametrize("workload", [many_prompts, admitted_mid_count])
def test_quiet_steps_reserve_exactly_as_the_full_path(monkeypatch, workload):
    # The steps in which nothing but the fill counts moves skip the slot bookkeeping (`DecodeSlots._quiet_steps`):
    # every reserve and reserve ahead leaves the same blocks, fill counts and host tables as the full path's, in
    # the same step, and a good share of the steps are quiet (45% of many_prompts' at 16-token blocks).
    full, full_tokens, none = slot_history(monkeypatch, False, workload)
    quick, tokens, quiet = slot_history(monkeypatch, True, workload)
    reserves = sum(result is not None for result, *_ in full)
    assert none == 0 and quiet > reserves // 4
    assert tokens == full_tokens
    assert len(quick) == len(full)
    for i, ((r, blocks, fill, tables), (r0, blocks0, fill0, tables0)) in enumerate(zip(quick, full)):
        assert (r, blocks) == (r0, blocks0), i
        assert np.array_equal(fill, fill0) and np.array_equal(tables, tables0), i
