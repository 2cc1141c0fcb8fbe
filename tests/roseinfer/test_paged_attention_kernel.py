"""The Triton paged-attention decode kernel against the torch reference, on random (never zero) data."""

import pytest
import torch

from roseinfer.kernels.paged_attention import AttentionTile, pick_attention_tile

BLOCK = 64


def test_tile_follows_the_programs_count():
    # few programs: whole blocks on four warps, three stages below 256 pairs and two from there; from 768 pairs
    # one warp and 16 tokens, two stages from 1,024; the switch off: the earlier tile everywhere; small blocks
    # bound the chunk
    assert pick_attention_tile(12, 64) == AttentionTile(64, 4, 3)
    assert pick_attention_tile(255, 64) == AttentionTile(64, 4, 3)
    assert pick_attention_tile(256, 64) == AttentionTile(64, 4, 2)
    assert pick_attention_tile(767, 64) == AttentionTile(64, 4, 2)
    assert pick_attention_tile(768, 64) == AttentionTile(16, 1, 3)
    assert pick_attention_tile(1024, 64) == AttentionTile(16, 1, 2)
    assert pick_attention_tile(6144, 8) == AttentionTile(8, 1, 2)
    for pairs in (12, 96, 768, 6144):
        assert pick_attention_tile(pairs, 64, chunks=False) == AttentionTile(64, 4, 2)
    # beside an early-released attn_proj (PDL buckets): no 16-token tiles, the stages as without
    assert pick_attention_tile(800, 64, shares_sms=True) == AttentionTile(64, 4, 2)
    assert pick_attention_tile(192, 64, shares_sms=True) == AttentionTile(64, 4, 3)


@pytest.mark.gpu
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
    tile = pick_attention_tile(batch * heads, BLOCK)
    out = paged_decode_attention_triton(q, k_new, v_new, kc, vc, table, past, scale, tile)
    tol = 2e-3 if dtype == torch.float16 else 1e-5
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("tile", [(64, 4, 2), (64, 4, 3), (32, 2, 2), (16, 1, 2), (16, 1, 3), (16, 4, 1)])
@pytest.mark.parametrize("block", [16, 64])
def test_every_tile_matches_reference_at_block_edges(tile, block):
    # Each tile the rule can pick and a few it does not, over pasts at and around block and chunk edges (the
    # chunk bounded by the block, as the rule bounds it), head_dim 80 (padded to 128 lanes), with the append.
    from roseinfer.attention import paged_decode_attention
    from roseinfer.kernels.kv_append import kv_append_reference
    from roseinfer.kernels.paged_attention import paged_decode_attention_triton

    tile = AttentionTile(min(tile[0], block), tile[1], tile[2])
    g = torch.Generator(device="cuda").manual_seed(block + tile.chunk)
    heads, head_dim, max_blocks = 3, 80, -(-321 // block)
    pasts = [0, 1, 15, 16, 17, 31, 33, block - 1, block, block + 1, 2 * block + 15, 320]
    batch = len(pasts)
    n_blocks = batch * max_blocks + 2
    kc, vc = (
        torch.rand(n_blocks, heads, block, head_dim, generator=g, device="cuda").half() + 0.1
        for _ in range(2)
    )
    q, k_new, v_new = (
        torch.randn(batch, heads, head_dim, generator=g, device="cuda").half() for _ in range(3)
    )
    past = torch.tensor(pasts, device="cuda")
    table = torch.randperm(n_blocks, generator=g, device="cuda")[: batch * max_blocks].view(batch, max_blocks)
    kc_ref, vc_ref = kc.clone(), vc.clone()
    rows = torch.arange(batch, device="cuda")
    kv_append_reference(kc_ref, vc_ref, k_new, v_new, table[rows, past // block], past % block)
    ref = paged_decode_attention(
        q.float(), k_new.float(), v_new.float(), kc.float(), vc.float(), table, past, head_dim**-0.5
    )
    out = paged_decode_attention_triton(
        q, k_new, v_new, kc, vc, table, past, head_dim**-0.5, tile, append=True
    )
    torch.testing.assert_close(out.float(), ref, atol=2e-3, rtol=2e-3)
    assert torch.equal(kc, kc_ref) and torch.equal(vc, vc_ref)


@pytest.mark.gpu
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
    tile = pick_attention_tile(batch * heads, BLOCK)
    out = paged_decode_attention_triton(
        q, k_new, v_new, kc, vc, table, past, head_dim**-0.5, tile, append=True
    )
    torch.testing.assert_close(out.float(), ref, atol=2e-3, rtol=2e-3)
    assert torch.equal(kc, kc_ref) and torch.equal(vc, vc_ref)


@pytest.mark.gpu
def test_engine_with_paged_attn_matches_hf(tiny_checkpoint):
    from roseinfer import LLM, SamplingParams
    from tests.roseinfer.test_engine_cuda import hf_outputs
    from tests.roseinfer.test_engine_matches_hf import NEW_TOKENS, make_prompts

    torch.backends.cuda.matmul.allow_tf32 = False
    ref = hf_outputs(tiny_checkpoint, torch.float32)
    llm = LLM(tiny_checkpoint, device="cuda", prefill_max_batch_size=1, max_batch_size=8, paged_attn=True)
    outs = llm.generate(make_prompts(), SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True))
    assert [o.token_ids for o in outs] == ref


def test_the_tile_rule_reaches_the_kernel_in_both_decode_paths(monkeypatch):
    # GraphKernels.attention_chunks (captured step; the engine's default on, off a measurement hook) and DecodeKV
    # (eager step) -> the tile the attention kernel is launched with (the launcher recorded in place of the Triton
    # one: CPU tensors here).
    import roseinfer.kernels.paged_attention as pa
    from roseinfer.graph_kernels import GraphKernels
    from roseinfer.kv_context import DecodeKV, StaticDecodeKV

    launched = []
    monkeypatch.setattr(pa, "paged_decode_attention_triton", lambda *a, **k: launched.append(a[8]) or a[0])
    cache = type("Cache", (), {})()  # what the attention reads of a KVCache
    cache.k_caches = cache.v_caches = [torch.zeros(4, 12, BLOCK, 8)]  # [N, H, BLOCK, D]
    cache.triton_min_batch = cache.triton_min_batch_graph = 1
    cache.use_triton = False
    batch = 64  # 768 pairs: a 16-token tile when on
    q = torch.zeros(batch, 12, 8)
    tables, past = torch.zeros(1, batch, 2, dtype=torch.int32), torch.zeros(batch, dtype=torch.int32)
    assert GraphKernels().attention_chunks
    for chunks in (True, False):
        kernels = GraphKernels(attention_chunks=chunks)
        static = StaticDecodeKV(
            cache, tables, past, 1.0, paged_attn=True, attention_chunks=kernels.attention_chunks
        )
        eager = DecodeKV(None, cache, [], tables, past, 1.0, False, True, attention_chunks=chunks)
        for kv in (static, eager):
            kv.attend(0, q, q, q)
        want = AttentionTile(16, 1, 3) if chunks else AttentionTile(BLOCK, 4, 2)
        assert launched[-2:] == [want, want]
    # In a PDL bucket whose attention releases attn_proj early, no 16-token tiles (`pick_attention_tile`).
    import roseinfer.kernels.pdl as pdl

    monkeypatch.setattr(pdl, "pdl_attention_release", lambda: True)
    static.attention_chunks = True
    static.attend(0, q, q, q)
    assert launched[-1] == AttentionTile(BLOCK, 4, 2)


@pytest.mark.gpu
def test_engine_at_a_batch_whose_attention_takes_chunks_matches_hf(tiny_checkpoint):
    # Enough copies of the prompts that the decode batch's (sequence, head) pairs take 16-token tiles: the
    # chunked kernel end to end, in captured steps, against Hugging Face's greedy tokens (fp32).
    from roseinfer import LLM, SamplingParams
    from tests.roseinfer.test_engine_cuda import hf_outputs
    from tests.roseinfer.test_engine_matches_hf import NEW_TOKENS, make_prompts

    torch.backends.cuda.matmul.allow_tf32 = False
    ref = hf_outputs(tiny_checkpoint, torch.float32)
    prompts = make_prompts()
    heads = 4  # tiny_checkpoint's
    copies = -(-768 // (heads * len(prompts)))
    batch = copies * len(prompts)
    llm = LLM(tiny_checkpoint, device="cuda", max_batch_size=batch, paged_attn=True, cuda_graph=True)
    assert pick_attention_tile(llm.engine.graphs.bucket_for(batch) * heads, BLOCK).chunk == 16
    outs = llm.generate(prompts * copies, SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True))
    assert [o.token_ids for o in outs] == ref * copies
