"""The Triton KV-append kernels against the torch reference, on random (never zero) data, poisoned caches."""

import pytest
import torch

pytestmark = pytest.mark.gpu

BLOCK = 64


def setup(batch, heads, head_dim, dtype, rows, mode, seed=0):
    from roseinfer.kernels.kv_append import MODE_FULL_BATCH, MODE_GENERAL

    g = torch.Generator(device="cuda").manual_seed(seed)
    n_blocks = max(2 * batch, 8)
    kc = torch.full((n_blocks, heads, BLOCK, head_dim), float("nan"), dtype=dtype, device="cuda")
    vc = kc.clone()
    k = torch.rand(batch, heads, head_dim, generator=g, device="cuda").to(dtype) + 0.5  # never zero
    v = torch.rand(batch, heads, head_dim, generator=g, device="cuda").to(dtype) + 0.5
    block = torch.randperm(n_blocks, generator=g, device="cuda")[:rows]  # distinct blocks: no write conflicts
    # positions at block edges and inside
    pos = torch.tensor([0, BLOCK - 1, 1, BLOCK // 2], device="cuda").repeat(rows // 4 + 1)[:rows]
    if mode == MODE_FULL_BATCH:
        pos = torch.full((rows,), BLOCK - 1, device="cuda")
    batch_idx = torch.randperm(batch, generator=g, device="cuda")[:rows] if mode == MODE_GENERAL else None
    return kc, vc, k, v, block, pos, batch_idx


@pytest.mark.parametrize("batch", [1, 3, 128, 129, 1024, 2048])
@pytest.mark.parametrize("head_dim", [64, 80, 48])
@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_kernel_matches_reference(batch, head_dim, mode, dtype):
    from roseinfer.kernels.kv_append import MODE_GENERAL, kv_append_reference, kv_append_triton

    rows = max(1, batch // 2) if mode == MODE_GENERAL else batch
    kc, vc, k, v, block, pos, batch_idx = setup(batch, 12, head_dim, dtype, rows, mode)
    ref_k, ref_v = kc.clone(), vc.clone()
    kv_append_reference(ref_k, ref_v, k, v, block, pos, batch_idx)
    kv_append_triton(kc, vc, k, v, block, pos, batch_idx, mode=mode)
    torch.cuda.synchronize()
    # Every slot written equals the reference; every other slot is still NaN (no stray writes).
    assert torch.equal(torch.isnan(kc), torch.isnan(ref_k)) and torch.equal(
        torch.isnan(vc), torch.isnan(ref_v)
    )
    assert torch.equal(torch.nan_to_num(kc), torch.nan_to_num(ref_k))
    assert torch.equal(torch.nan_to_num(vc), torch.nan_to_num(ref_v))
    assert (~torch.isnan(kc)).sum() == rows * 12 * head_dim


def test_engine_uses_triton_above_min_batch(monkeypatch, tiny_checkpoint):
    from roseinfer import LLM, SamplingParams

    monkeypatch.setenv("ROSELLM_TRITON_KV_APPEND_MIN_BATCH", "2")
    prompts = [[i + 1] * (5 + 9 * i) for i in range(6)]
    params = SamplingParams(max_new_tokens=80, ignore_eos=True)
    fast = LLM(tiny_checkpoint, device="cuda", max_batch_size=8)
    assert fast.engine.kv_cache.use_triton
    monkeypatch.setenv("ROSELLM_TRITON_KV_APPEND", "0")
    slow = LLM(tiny_checkpoint, device="cuda", max_batch_size=8)
    assert not slow.engine.kv_cache.use_triton
    assert [o.token_ids for o in fast.generate(prompts, params)] == [
        o.token_ids for o in slow.generate(prompts, params)
    ]
