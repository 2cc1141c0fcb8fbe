"""The Triton paged-attention decode kernel against the torch reference, on random (never zero) data."""

import pytest
import torch

pytestmark = pytest.mark.gpu
BLOCK = 64


@pytest.mark.parametrize("batch", [1, 7, 64, 256])
@pytest.mark.parametrize("head_dim", [64, 80])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_kernel_matches_reference(batch, head_dim, dtype):
    from roseinfer.attention import paged_decode_attention
    from roseinfer.kernels.paged_attention import paged_decode_attention_triton

    g = torch.Generator(device="cuda").manual_seed(batch * head_dim)
    heads, max_blocks = 12, 5
    n_blocks = batch * max_blocks + 3
    kc = torch.rand(n_blocks, heads, BLOCK, head_dim, generator=g, device="cuda").to(dtype) + 0.1
    vc = torch.rand(n_blocks, heads, BLOCK, head_dim, generator=g, device="cuda").to(dtype) + 0.1
    q = torch.randn(batch, heads, head_dim, generator=g, device="cuda").to(dtype)
    k_new = torch.randn(batch, heads, head_dim, generator=g, device="cuda").to(dtype)
    v_new = torch.randn(batch, heads, head_dim, generator=g, device="cuda").to(dtype)
    # Lengths at and around block edges, 0 (only the new token) and the full table.
    edges = torch.tensor([0, 1, 63, 64, 65, 127, 128, 200, 5 * BLOCK], device="cuda")
    past = edges[torch.arange(batch, device="cuda") % len(edges)]
    table = torch.randperm(n_blocks, generator=g, device="cuda")[: batch * max_blocks].view(batch, max_blocks)
    scale = head_dim**-0.5
    ref = paged_decode_attention(
        q.float(), k_new.float(), v_new.float(), kc.float(), vc.float(), table, past, scale
    )
    out = paged_decode_attention_triton(q, k_new, v_new, kc, vc, table, past, scale)
    tol = 2e-3 if dtype == torch.float16 else 1e-5
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("batch", [1, 7, 64, 256])
@pytest.mark.parametrize("head_dim", [64, 80])
def test_kernel_with_append_writes_the_slot_and_attends_the_same(batch, head_dim):
    # append=True: the kernel also writes the new K/V at each sequence's slot (token `past`), as the KV append
    # of the step; the rest of the cache is untouched and the attention output is the same.
    from roseinfer.attention import paged_decode_attention
    from roseinfer.kernels.kv_append import kv_append_reference
    from roseinfer.kernels.paged_attention import paged_decode_attention_triton

    g = torch.Generator(device="cuda").manual_seed(batch + head_dim)
    heads, max_blocks = 12, 5
    n_blocks = batch * max_blocks + 3
    kc = torch.rand(n_blocks, heads, BLOCK, head_dim, generator=g, device="cuda").half() + 0.1
    vc = torch.rand(n_blocks, heads, BLOCK, head_dim, generator=g, device="cuda").half() + 0.1
    q, k_new, v_new = (
        torch.randn(batch, heads, head_dim, generator=g, device="cuda").half() for _ in range(3)
    )
    edges = torch.tensor([0, 1, 63, 64, 65, 127, 128, 200, 5 * BLOCK - 1], device="cuda")
    past = edges[torch.arange(batch, device="cuda") % len(edges)]
    table = torch.randperm(n_blocks, generator=g, device="cuda")[: batch * max_blocks].view(batch, max_blocks)
    rows = torch.arange(batch, device="cuda")
    kc_ref, vc_ref = kc.clone(), vc.clone()
    kv_append_reference(kc_ref, vc_ref, k_new, v_new, table[rows, past // BLOCK], past % BLOCK)
    ref = paged_decode_attention(
        q.float(), k_new.float(), v_new.float(), kc.float(), vc.float(), table, past, head_dim**-0.5
    )
    out = paged_decode_attention_triton(q, k_new, v_new, kc, vc, table, past, head_dim**-0.5, append=True)
    torch.testing.assert_close(out.float(), ref, atol=2e-3, rtol=2e-3)
    assert torch.equal(kc, kc_ref) and torch.equal(vc, vc_ref)


def test_engine_with_paged_attn_matches_hf(tiny_checkpoint):
    from roseinfer import LLM, SamplingParams
    from tests.roseinfer.test_engine_cuda import hf_outputs
    from tests.roseinfer.test_engine_matches_hf import NEW_TOKENS, make_prompts

    torch.backends.cuda.matmul.allow_tf32 = False
    ref = hf_outputs(tiny_checkpoint, torch.float32)
    llm = LLM(tiny_checkpoint, device="cuda", prefill_max_batch_size=1, max_batch_size=8, paged_attn=True)
    outs = llm.generate(make_prompts(), SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True))
    assert [o.token_ids for o in outs] == ref
