"""Attention over the paged KV cache: torch references (the Triton kernels are tested against these)."""

from __future__ import annotations

import torch


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
    """cache [N, H, BLOCK, D], block_table [B, M] -> [B, H, M*BLOCK, D] (token t of row b at index t)."""
    b, m = block_table.shape
    _, h, bs, d = cache.shape
    # index_select on the flattened table is several times faster than advanced indexing on CPU.
    blocks = cache.index_select(0, block_table.reshape(-1)).view(b, m, h, bs, d)
    # contiguous (the callers view it as [B*H, T, D]): a copy only for blocks of one token, where the reshape is a
    # view; at any other size the reshape copied already
    return blocks.transpose(1, 2).reshape(b, h, m * bs, d).contiguous()


def decode_bias(past_lens: torch.Tensor, t: int, num_heads: int, dtype: torch.dtype) -> torch.Tensor:
    """[B*H, 1, T] additive mask: 0 on each sequence's past slots, -inf beyond (same for every layer of a step)."""
    pad = torch.arange(t, device=past_lens.device)[None, :] >= past_lens[:, None]  # [B, T]
    bias = torch.zeros(pad.shape, dtype=dtype, device=past_lens.device).masked_fill(pad, float("-inf"))
    return bias.repeat_interleave(num_heads, dim=0).unsqueeze(1)


def paged_decode_attention(
    q: torch.Tensor,  # [B, H, D] query of the new token
    k_new: torch.Tensor,  # [B, H, D] key of the new token
    v_new: torch.Tensor,  # [B, H, D]
    k_cache: torch.Tensor,  # [N, H, BLOCK, D]
    v_cache: torch.Tensor,
    block_table: torch.Tensor,  # [B, M] blocks holding each sequence's past tokens
    past_lens: torch.Tensor,  # [B] past tokens per sequence (the new token excluded)
    scale: float,
    bias: torch.Tensor | None = None,  # [B*H, 1, M*BLOCK] from decode_bias; computed here when None
) -> torch.Tensor:
    """Attention of each new token over its past tokens (read through the block table) and itself -> [B, H, D].

    The new token is handled apart from the cache so the block table can be built before this step's
    appends (a rollover block does not need to be in it).
    """
    b, h, d = q.shape
    keys = gather_kv(k_cache, block_table)  # [B, H, T, D]
    values = gather_kv(v_cache, block_table)
    t = keys.shape[2]
    if bias is None:
        bias = decode_bias(past_lens, t, h, q.dtype)
    q_rows = q.reshape(b * h, 1, d)
    scores = torch.baddbmm(bias, q_rows, keys.view(b * h, t, d).transpose(1, 2), alpha=scale)  # [B*H, 1, T]
    self_score = (q * k_new).sum(-1).reshape(b * h, 1, 1) * scale
    probs = torch.softmax(torch.cat([scores, self_score], dim=-1).float(), dim=-1).to(
        q.dtype
    )  # [B*H, 1, T+1]
    out = torch.bmm(probs[..., :t], values.view(b * h, t, d)).view(b, h, d)
    return out + probs[..., t:].view(b, h, 1) * v_new
