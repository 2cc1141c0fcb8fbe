"""Rollover blocks reserved ahead (`blocks_ahead`, the default) against the earlier design that allocates every
block in the step that starts it: the same tokens and KV contents step for step, and the switch is honoured.
The static decode path (what CUDA graphs replay) run eagerly, on CPU."""

import math

import numpy as np
import pytest
import torch

from roseinfer import LLM, SamplingParams
from tests.helpers import benchmark_config
from tests.roseinfer.test_engine_matches_hf import make_prompts

BLOCK = 16


def static_llm(blocks_ahead: bool, **kw) -> LLM:
    llm = LLM("gpt2-tiny", block_size=BLOCK, blocks_ahead=blocks_ahead, **kw)
    llm.engine.use_static_decode(capture=False)
    return llm


def kv_of(engine, seq) -> list[torch.Tensor]:
    """Per layer, the keys and values of the sequence's cached tokens read through its blocks: [2, T, H, D]."""
    cache, pos = engine.kv_cache, np.arange(seq.num_cached)
    out = []
    for layer, ids in enumerate(seq.block_ids):
        blocks = torch.as_tensor(np.asarray(ids)[pos // BLOCK])
        slots = torch.as_tensor(pos % BLOCK)
        out.append(
            torch.stack([cache.k_caches[layer][blocks, :, slots], cache.v_caches[layer][blocks, :, slots]])
        )
    return out


@pytest.mark.parametrize("overlap", [True, False])
def test_both_designs_give_the_same_tokens_and_kv_every_step(overlap):
    # Prompts of many lengths (sequences start blocks in different steps), shared prefixes (prefix-cache hits, a
    # copy-on-write) and two equal one-token prompts (lock-step rollovers); admission one request per step.
    prompts = [p[:80] for p in make_prompts()] + [[7], [7]]
    params = SamplingParams(max_new_tokens=70, ignore_eos=True)
    engines = [
        static_llm(ahead, max_batch_size=6, prefill_max_batch_size=1, overlap_decode=overlap).engine
        for ahead in (True, False)
    ]
    seqs = [[e.add_request(p, params) for p in prompts] for e in engines]
    held_ahead = 0
    while any(e.has_unfinished() for e in engines):
        for e in engines:
            e.step()
        for a, b in zip(*seqs):
            assert a.output_ids == b.output_ids and a.num_cached == b.num_cached
            if a.block_ids and b.block_ids:
                for ka, kb in zip(kv_of(engines[0], a), kv_of(engines[1], b)):
                    assert torch.equal(ka, kb)
                # Blocks held beyond what the cached tokens (and the token being written) need.
                spare_a = len(a.block_ids[0]) - math.ceil((a.num_cached + 1) / BLOCK)
                spare_b = len(b.block_ids[0]) - math.ceil((b.num_cached + 1) / BLOCK)
                assert spare_b <= 0 and spare_a <= 1
                held_ahead += spare_a == 1
    assert held_ahead > 0
    for key in ("rollovers", "cow", "prefix_hit_blocks", "decode_steps"):
        assert engines[0].stats[key] == engines[1].stats[key], key
    assert engines[0].stats["cow"] > 0 and engines[0].stats["rollovers"] > 0
    assert engines[0].rollover_steps == engines[1].rollover_steps
    for e in engines:
        assert e.mgr.num_free() == e.mgr.num_blocks and int(e.mgr.refcount.sum()) == 0


def blocks_allocated_per_step(llm: LLM, batch: int, new_tokens: int) -> tuple[dict[int, int], set[int]]:
    """Blocks of layer 0 allocated in each decode step of a lock-step batch (equal one-token prompts), and the
    steps that started blocks."""
    engine, mgr = llm.engine, llm.engine.mgr
    per_step: dict[int, int] = {}
    take = mgr._take  # every allocation of several blocks goes through it

    def counting(layer, n):
        if layer == 0:
            per_step[engine.decode_steps] = per_step.get(engine.decode_steps, 0) + n
        return take(layer, n)

    mgr._take = counting
    llm.generate([[5]] * batch, SamplingParams(max_new_tokens=new_tokens, ignore_eos=True))
    return per_step, engine.rollover_steps


def test_the_switch_is_honoured():
    batch = 16
    old, roll_old = blocks_allocated_per_step(static_llm(False, max_batch_size=batch), batch, 70)
    new, roll_new = blocks_allocated_per_step(static_llm(True, max_batch_size=batch), batch, 70)
    assert roll_old == roll_new and len(roll_old) == 4  # tokens 16, 32, 48 and 64 start blocks
    # Earlier design: the whole batch's blocks in each step that starts them, nothing elsewhere.
    assert {s: n for s, n in old.items() if n} == {s: batch for s in roll_old}
    # Ahead: nothing in those steps; a few sequences per step before them (the batch over a quarter block).
    assert not any(new.get(s) for s in roll_new)
    budget = math.ceil(batch / (BLOCK // 4))
    assert max(new.values()) == budget and sum(new.values()) == sum(old.values())


def test_the_benchmark_flag_selects_the_earlier_design():
    assert benchmark_config().blocks_ahead is True
    assert benchmark_config("--no-blocks-ahead").blocks_ahead is False
