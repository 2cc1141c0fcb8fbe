"""Greedy output of the engine equals Hugging Face `generate`, token for token, under every switch."""

import dataclasses
import itertools

import pytest
import torch

from roseinfer import LLM, SamplingParams

NEW_TOKENS = 150


def make_prompts():
    g = torch.Generator().manual_seed(1)
    rand = lambda n: torch.randint(0, 511, (n,), generator=g).tolist()  # noqa: E731
    prefix = rand(128)
    return [
        rand(1),
        rand(63),
        rand(64),
        rand(65),
        rand(130),
        prefix + rand(5),  # shares two full blocks with the next two
        prefix + rand(20),
        list(prefix),  # a full-prefix hit: its last token is recomputed into a shared block (copy-on-write)
    ]


def hf_outputs(path, dtype=torch.float32, device="cpu"):
    """Hugging Face greedy `generate` of every prompt, one at a time (no padding), exactly NEW_TOKENS each."""
    from transformers import GPT2LMHeadModel

    model = GPT2LMHeadModel.from_pretrained(path, torch_dtype=dtype).to(device).eval()
    outs = []
    for prompt in make_prompts():
        ids = torch.tensor([prompt], device=device)
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=NEW_TOKENS,
                min_new_tokens=NEW_TOKENS,
                do_sample=False,
                pad_token_id=0,
            )
        outs.append(out[0, len(prompt) :].tolist())
    return outs


@pytest.fixture(scope="module")
def hf_reference(tiny_checkpoint):
    return hf_outputs(tiny_checkpoint)


SWITCHES = ["batched_kv_append", "batched_rollover", "block_table_cache", "prefix_cache"]


@pytest.mark.parametrize("values", list(itertools.product([True, False], repeat=len(SWITCHES))))
def test_greedy_matches_hf_for_every_switch(tiny_checkpoint, hf_reference, values):
    options = dict(zip(SWITCHES, values))
    # One prompt prefilled per step, so later prompts find the earlier ones' blocks in the prefix cache.
    llm = LLM(tiny_checkpoint, prefill_max_batch_size=1, max_batch_size=8, **options)
    outs = llm.generate(make_prompts(), SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True))
    for i, (ours, ref) in enumerate(zip(outs, hf_reference)):
        assert ours.token_ids == ref, (
            f"prompt {i} diverges at token {next(j for j, (a, b) in enumerate(zip(ours.token_ids, ref)) if a != b)}"
        )
    stats = llm.engine.stats
    assert stats["rollovers"] > 0
    if options["prefix_cache"]:
        assert stats["prefix_hit_blocks"] >= 4  # two later prompts each reuse the two prefix blocks
        assert stats["cow"] >= 1
    else:
        assert stats["prefix_hit_blocks"] == 0
    mgr = llm.engine.mgr
    assert mgr.num_free() == mgr.num_blocks
    assert int(mgr.refcount.sum()) == 0


def test_matches_hf_when_the_pool_forces_preemption(tiny_checkpoint, hf_reference):
    # 14 blocks cannot hold 8 sequences of up to 280 tokens: sequences are preempted and recomputed.
    llm = LLM(tiny_checkpoint, num_blocks=14, max_batch_size=8)
    outs = llm.generate(make_prompts(), SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True))
    assert [o.token_ids for o in outs] == hf_reference
    assert llm.engine.stats["preemptions"] > 0
    assert llm.engine.mgr.num_free() == 14


@pytest.mark.parametrize("static", [False, True])
def test_blocks_of_one_token_match_hf(tiny_checkpoint, hf_reference, static):
    # --block-size 1, eager and static: every token starts a block (the gathered past was a view the attention could
    # not flatten, and every step raised)
    llm = LLM(tiny_checkpoint, block_size=1, max_batch_size=8)
    if static:
        llm.engine.use_static_decode(capture=False)
    outs = llm.generate(make_prompts(), SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True))
    assert [o.token_ids for o in outs] == hf_reference


@pytest.mark.parametrize("max_batch", [8, 6])
def test_static_decode_path_matches_hf(tiny_checkpoint, hf_reference, max_batch):
    # The path CUDA graphs replay (slots allocated before the step, inputs in static buffers, batches padded to
    # a bucket whose extra rows write the pad block), run eagerly so it is checked on CPU too. All greedy, so each
    # step is launched before the previous step's tokens are read (the overlapped decode), its token ids and past
    # lengths left on the device by the previous step. Requests arrive one per step (prefill batch 1), so the
    # pipeline drains and restarts around every admission.
    llm = LLM(tiny_checkpoint, prefill_max_batch_size=1, max_batch_size=max_batch)
    eager = LLM(tiny_checkpoint, prefill_max_batch_size=1, max_batch_size=max_batch)
    llm.engine.use_static_decode(capture=False)
    params = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)
    outs = llm.generate(make_prompts(), params)
    assert [o.token_ids for o in outs] == hf_reference
    eager.generate(make_prompts(), params)
    # The same forward passes, rollovers and copy-on-writes as the eager append counts.
    for key in ("rollovers", "cow", "prefix_hit_blocks", "decode_steps", "decode_kv_tokens"):
        assert llm.engine.stats[key] == eager.engine.stats[key], key
    # Ranges that only launch (after a prefill) or only read (a drain) come on top of the forward passes.
    assert llm.engine.decode_steps > llm.engine.stats["decode_steps"]
    assert llm.engine.runner.in_flight is None
    mgr = llm.engine.mgr
    assert mgr.num_free() == mgr.num_blocks and int(mgr.refcount.sum()) == 0


def test_static_decode_path_reads_each_step_when_a_request_samples(tiny_checkpoint, hf_reference):
    # A request sampled at a temperature needs its step's logits on the host: while it runs, each step's tokens
    # are read before the next step is launched (no step in flight), and the greedy requests beside it still give
    # Hugging Face's tokens.
    llm = LLM(tiny_checkpoint, prefill_max_batch_size=1, max_batch_size=8)
    llm.engine.use_static_decode(capture=False)
    runner = llm.engine.runner
    overlapped, plain = [], []
    launch = runner._launch_static

    def counting(seqs, restage):
        (plain if any(s.params.temperature for s in seqs) else overlapped).append(len(seqs))
        return launch(seqs, restage)

    runner._launch_static = counting
    engine = llm.engine
    greedy = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)
    sampled = engine.add_request(
        [5, 6, 7], SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True, temperature=0.8)
    )
    seqs = [engine.add_request(p, greedy) for p in make_prompts()]
    while engine.has_unfinished():
        engine.step()
    assert [s.output_ids for s in seqs] == hf_reference
    assert len(sampled.output_ids) == NEW_TOKENS
    assert plain and overlapped
    assert runner.in_flight is None
    assert engine.mgr.num_free() == engine.mgr.num_blocks and int(engine.mgr.refcount.sum()) == 0


def test_every_decode_path_stops_at_eos(tiny_checkpoint, hf_reference):
    # A token that Hugging Face's greedy output reaches mid-way in some sequences but not all plays EOS. The
    # overlapped decode has launched the next step when it reads that token: the extra token is dropped.
    eos = next(
        t for t in hf_reference[0][5:] if 2 <= sum(t in out[1:] for out in hf_reference) < len(hf_reference)
    )
    expected = [out[: out.index(eos) + 1] if eos in out else out for out in hf_reference]
    assert any(len(e) < NEW_TOKENS for e in expected) and any(len(e) == NEW_TOKENS for e in expected)
    for static in (False, True):  # static: overlapped, every request greedy
        llm = LLM(tiny_checkpoint, max_batch_size=8)
        if static:
            llm.engine.use_static_decode(capture=False)
        llm.engine.model_cfg = dataclasses.replace(llm.engine.model_cfg, eos_token_id=eos)
        outs = llm.generate(make_prompts(), SamplingParams(max_new_tokens=NEW_TOKENS))
        assert [o.token_ids for o in outs] == expected, static
        mgr = llm.engine.mgr
        assert mgr.num_free() == mgr.num_blocks and int(mgr.refcount.sum()) == 0


def test_static_decode_path_under_preemption(tiny_checkpoint, hf_reference):
    llm = LLM(tiny_checkpoint, num_blocks=14, max_batch_size=8)
    llm.engine.use_static_decode(capture=False)
    outs = llm.generate(make_prompts(), SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True))
    assert [o.token_ids for o in outs] == hf_reference
    assert llm.engine.stats["preemptions"] > 0


def test_padded_lm_head_gives_the_same_tokens(tiny_checkpoint, hf_reference):
    # On CUDA the lm_head runs on a vocabulary padded to a multiple of 64; here 512 -> 600 rows.
    llm = LLM(tiny_checkpoint, max_batch_size=8)
    llm.engine.model.pad_lm_head(multiple=100)
    assert llm.engine.model.lm_head_weight.shape[0] == 600
    assert llm.engine.model.wte.weight.data_ptr() == llm.engine.model.lm_head_weight.data_ptr()
    outs = llm.generate(make_prompts(), SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True))
    assert [o.token_ids for o in outs] == hf_reference
