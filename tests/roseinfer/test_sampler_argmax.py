"""The greedy tokens of CPU logits come from numpy's argmax (roseinfer/sampler.py: torch's CPU argmax is a scalar
loop the machine's slow spells slow 2x, docs/BENCHMARKS.md session 24): the same indices as torch.argmax, ties,
NaN and infinities included, and the engine's tokens unchanged."""

import pytest
import torch

from roseinfer import LLM, SamplingParams, sampler
from roseinfer.sampler import argmax, sample


def _cases(dtype: torch.dtype, vocab: int) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(vocab)
    x = torch.randn(5, vocab, generator=g).to(dtype)  # [5, V]
    ties = x.clone()
    ties[:, vocab // 2 :] = ties.max()  # the largest value from the middle on: the first of them
    odd = x.clone()
    odd[0, 1] = odd[0, -1] = float("nan")  # two NaNs: the first
    odd[1, 0] = odd[1, -1] = float("inf")
    odd[2, :] = float("-inf")  # nothing larger than -inf: index 0
    odd[3, :] = 0.0
    odd[3, -1] = -0.0  # -0.0 == 0.0: a tie, the first
    small = torch.randint(-3, 3, (5, vocab), generator=g).to(dtype)  # many ties
    strided = x.t().contiguous().t()  # [5, V], not contiguous
    return [x, ties, odd, small, strided]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("vocab", [3, 64, 50257])
def test_argmax_is_torch_argmax(dtype, vocab):
    for logits in _cases(dtype, vocab):
        got, want = argmax(logits), torch.argmax(logits, dim=-1)
        assert got.dtype == torch.int64 and torch.equal(got, want), (logits, got, want)


def test_argmax_of_logits_that_need_grad_or_came_from_inference_mode():
    w = torch.randn(4, 100, requires_grad=True)
    assert torch.equal(argmax(w * 2), torch.argmax(w * 2, dim=-1))
    with torch.inference_mode():
        logits = torch.randn(4, 100)
        assert torch.equal(argmax(logits), torch.argmax(logits, dim=-1))


def test_greedy_cpu_sampling_does_not_run_torchs_argmax(monkeypatch):
    """The slow scalar loop is not on the CPU's greedy path (its result is checked above and below)."""

    def refused(*args, **kwargs):
        raise AssertionError("torch.argmax on CPU float32 logits")

    logits = torch.randn(16, 50257)  # [B, V]: the CPU demo's
    want = torch.argmax(logits, dim=-1).tolist()
    monkeypatch.setattr(torch, "argmax", refused)
    assert sample(logits, [0.0] * 16, torch.Generator().manual_seed(0)) == want


def test_the_engines_greedy_tokens_are_those_of_torchs_argmax(monkeypatch):
    """gpt2-tiny's greedy tokens, 4 prompts x 24 tokens, with numpy's argmax and with torch's: the same."""
    llm = LLM("gpt2-tiny")
    prompts = [[1, 2, 3], [50, 60, 70, 80], [7], [100, 200, 300, 400, 500]]
    params = SamplingParams(max_new_tokens=24, ignore_eos=True)
    ours = [o.token_ids for o in llm.generate(prompts, params)]
    monkeypatch.setattr(sampler, "argmax", lambda logits: torch.argmax(logits, dim=-1))
    theirs = [o.token_ids for o in llm.generate(prompts, params)]
    assert ours == theirs and all(len(t) == 24 for t in ours)
