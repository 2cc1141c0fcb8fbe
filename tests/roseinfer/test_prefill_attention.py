"""The prefill's attention: never cuDNN's (which builds a graph for each new batch shape: a 60 ms to 1 s stall of
a serving engine whenever a new (prompts, tokens) pair arrives; docs/BENCHMARKS.md, session 22), the process-wide
flag the program's again afterwards; and on CUDA in half precision, prompts of different lengths in one
variable-length call a layer that computes what one causal call per prompt computes."""

import pytest
import torch
import torch.nn.functional as F

from roseinfer import LLM, SamplingParams, kv_context
from roseinfer.kv_context import prefill_attention_backends, varlen_applies, varlen_attention


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


def test_varlen_only_where_flash_attention_runs():
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert not varlen_applies(cpu, torch.float16, 0.125, 64)
    assert not varlen_applies(cuda, torch.float32, 0.125, 64)  # flash attention: half precision only
    assert varlen_applies(cuda, torch.float16, 0.125, 64) == (kv_context._VARLEN is not None)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_one_varlen_call_computes_each_prompts_causal_attention(dtype):
    lens = [3, 17, 1, 64, 5, 30]  # [T] packed in this order
    h, d = 12, 64
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(sum(lens), h, d, device="cuda", dtype=dtype, generator=g) for _ in range(3))
    cu = torch.tensor([0, *torch.tensor(lens).cumsum(0).tolist()], dtype=torch.int32, device="cuda")
    out = varlen_attention(q, k, v, cu, max(lens), 0.125)  # [T, H, D]
    for i in range(len(lens)):
        a, b = int(cu[i]), int(cu[i + 1])
        qi, ki, vi = (x[a:b].transpose(0, 1) for x in (q, k, v))  # [H, n, D]
        ref = F.scaled_dot_product_attention(qi.float(), ki.float(), vi.float(), is_causal=True, scale=0.125)
        torch.testing.assert_close(out[a:b].transpose(0, 1).float(), ref, atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
def test_fresh_prompts_in_one_call_and_prefix_hits_in_their_groups(tiny_checkpoint, monkeypatch):
    """A batch of fresh prompts of three lengths goes to one varlen call a layer; a later batch where two prompts
    share a cached 16-token prefix with it puts those two in a group of their own and the fresh one in the call."""
    made = []
    init = kv_context.PrefillKV.__init__

    def recording(self, *args, **kwargs):
        init(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(kv_context.PrefillKV, "__init__", recording)
    llm = LLM(tiny_checkpoint, device="cuda", dtype="float16", block_size=16, max_batch_size=8)
    prefix = list(range(1, 17))
    params = SamplingParams(max_new_tokens=2, ignore_eos=True)
    llm.generate([prefix + [20, 21], [5] * 7, [9] * 30], params)
    assert made[0].varlen is not None and made[0].varlen[0] is None and made[0].groups == []
    llm.generate([prefix + [30, 31, 32], prefix + [40, 41, 42], [7] * 11], params)
    kv = made[-1]
    rows, cu, longest = kv.varlen
    assert rows is not None and cu.tolist() == [0, 11] and longest == 11
    assert [(start, g) for start, g, *_ in kv.groups] == [(16, 2)]
