"""The prefill's attention never runs as cuDNN's (which builds a graph for each new batch shape: a 60 ms to 1 s
stall of a serving engine whenever a new (prompts, tokens) pair arrives; docs/BENCHMARKS.md, session 22), and the
process-wide flag is the program's again afterwards."""

import pytest
import torch

from roseinfer import LLM, SamplingParams, kv_context
from roseinfer.kv_context import prefill_attention_backends


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
