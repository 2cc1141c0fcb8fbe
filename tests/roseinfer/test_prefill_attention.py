"""The prefill's attention: never cuDNN's (which builds a graph for each new batch shape: a 60 ms to 1 s stall of
a serving engine whenever a new (prompts, tokens) pair arrives; docs/BENCHMARKS.md, session 22), the process-wide
flag the program's again afterwards; and prompts of different lengths in one padded call per bucket of similar
lengths, which computes what each prompt's own call computes."""

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from roseinfer import LLM, SamplingParams, kv_context
from roseinfer.kv_context import pad_buckets, prefill_attention_backends


@pytest.fixture
def cudnn_sdp_on():
    was = torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(True)
    yield
    torch.backends.cuda.enable_cudnn_sdp(was)


def test_off_inside_a_cuda_prefill_and_back_after_it_even_when_it_fails(cudnn_sdp_on):
    with prefill_attention_backends(torch.device("cuda", 0)):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    assert torch.backends.cuda.cudnn_sdp_enabled()
    with pytest.raises(RuntimeError, match="boom"), prefill_attention_backends(torch.device("cuda")):
        raise RuntimeError("boom")
    assert torch.backends.cuda.cudnn_sdp_enabled()


def test_a_program_that_turned_it_off_keeps_it_off_and_cpu_is_untouched(cudnn_sdp_on):
    with prefill_attention_backends(torch.device("cpu")):
        assert torch.backends.cuda.cudnn_sdp_enabled()
    torch.backends.cuda.enable_cudnn_sdp(False)
    with prefill_attention_backends(torch.device("cuda")):
        assert not torch.backends.cuda.cudnn_sdp_enabled()
    assert not torch.backends.cuda.cudnn_sdp_enabled()


@pytest.mark.gpu
def test_the_engine_prefills_without_cudnn_attention(tiny_checkpoint, cudnn_sdp_on, monkeypatch):
    """Prompts of several lengths in batches of several sizes (the shapes a serving load brings): every attention
    call of every prefill ran with cuDNN's attention off, and the program's flag is on again after."""
    seen = []
    sdpa = kv_context.F.scaled_dot_product_attention

    def recording(*args, **kwargs):
        seen.append(torch.backends.cuda.cudnn_sdp_enabled())
        return sdpa(*args, **kwargs)

    monkeypatch.setattr(kv_context.F, "scaled_dot_product_attention", recording)
    llm = LLM(tiny_checkpoint, device="cuda", dtype="float16", max_batch_size=8, prefill_max_batch_size=4)
    prompts = [[(7 * i + j) % 500 + 1 for j in range(3 + 5 * i)] for i in range(7)]
    outs = llm.generate(prompts, SamplingParams(max_new_tokens=4, ignore_eos=True))
    assert [len(o.token_ids) for o in outs] == [4] * 7
    assert seen and not any(seen), seen
    assert torch.backends.cuda.cudnn_sdp_enabled()


@given(st.lists(st.integers(1, 1024), min_size=1, max_size=16))
def test_buckets_cover_every_prompt_once_with_bounded_padding(lengths):
    buckets = pad_buckets(lengths)
    assert sorted(i for b in buckets for i in b) == list(range(len(lengths)))
    for b in buckets:
        assert b == sorted(b)  # packed order within a bucket
        real = sum(lengths[i] for i in b)
        assert len(b) * max(lengths[i] for i in b) <= 2 * real


def test_one_long_prompt_does_not_pad_the_short_ones():
    # the 6-token one joins the long one (2 x 1,000 padded rows against 1,006 real), the rest their own call
    assert pad_buckets([4, 1000, 5, 3, 4, 6]) == [[1, 5], [0, 2, 3, 4]]
    assert pad_buckets([16] * 8) == [list(range(8))]


def test_a_batch_of_mixed_lengths_decodes_as_each_prompt_alone(tiny_checkpoint):
    """One padded attention call for prompts of 1 to 40 tokens computes what each prompt's own prefill does: the
    greedy continuations are the same token for token (float32, CPU)."""
    prompts = [[(11 * i + j) % 400 + 1 for j in range(n)] for i, n in enumerate([5, 40, 1, 17, 3, 29, 8])]
    params = SamplingParams(max_new_tokens=6, ignore_eos=True)
    together = LLM(tiny_checkpoint, prefill_max_batch_size=8, max_batch_size=8, prefix_cache=False)
    alone = LLM(tiny_checkpoint, prefill_max_batch_size=1, max_batch_size=8, prefix_cache=False)
    assert [o.token_ids for o in together.generate(prompts, params)] == [
        o.token_ids for o in alone.generate(prompts, params)
    ]
