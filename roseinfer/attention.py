"""Attention over the paged KV cache: torch references (the Triton kernels are tested against these)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def gather_kv(cache: torch.Tensor, block_table: torch.Tensor) -> torch.Tensor:
    """cache [N, H, BLOCK, D], block_table [B, M] -> [B, H, M*BLOCK, D] (token t of row b at index t)."""
    b, m = block_table.shape
    _, h, bs, d = cache.shape
    return cache[block_table].permute(0, 2, 1, 3, 4).reshape(b, h, m * bs, d)


def paged_decode_attention(
    q: torch.Tensor,  # [B, H, D] query of the new token
    k_new: torch.Tensor,  # [B, H, D] key of the new token
    v_new: torch.Tensor,  # [B, H, D]
    k_cache: torch.Tensor,  # [N, H, BLOCK, D]
    v_cache: torch.Tensor,
    block_table: torch.Tensor,  # [B, M] blocks holding each sequence's past tokens
    past_lens: torch.Tensor,  # [B] past tokens per sequence (the new token excluded)
    scale: float,
    pad_mask: torch.Tensor | None = None,  # [B, M*BLOCK] True past each length; computed here when None
) -> torch.Tensor:
    """Attention of each new token over its past tokens (read through the block table) and itself -> [B, H, D].

    The new token is handled apart from the cache so the block table can be built before this step's
    appends (a rollover block does not need to be in it).
    """
    keys = gather_kv(k_cache, block_table)  # [B, H, T, D]
    values = gather_kv(v_cache, block_table)
    scores = torch.matmul(q.unsqueeze(2), keys.transpose(-1, -2)).squeeze(2) * scale  # [B, H, T]
    t = keys.shape[2]
    if pad_mask is None:
        pad_mask = decode_pad_mask(past_lens, t)
    scores = scores.masked_fill(pad_mask[:, None, :], float("-inf"))
    self_score = (q * k_new).sum(-1, keepdim=True) * scale  # [B, H, 1]
    probs = torch.softmax(torch.cat([scores, self_score], dim=-1).float(), dim=-1).to(q.dtype)  # [B, H, T+1]
    out = torch.matmul(probs[..., :t].unsqueeze(2), values).squeeze(2)  # [B, H, D]
    return out + probs[..., t:] * v_new


def decode_pad_mask(past_lens: torch.Tensor, t: int) -> torch.Tensor:
    """[B, T] True at the cache slots beyond each sequence's past length (same for every layer of a step)."""
    return torch.arange(t, device=past_lens.device)[None, :] >= past_lens[:, None]


def prefill_attention(
    q: torch.Tensor,  # [T, H, D] queries of tokens start..start+T-1
    k: torch.Tensor,  # [S, H, D] keys of tokens 0..S-1 (S = start + T)
    v: torch.Tensor,
    scale: float,
) -> torch.Tensor:
    """Causal attention of one sequence's new tokens over all its tokens -> [T, H, D]."""
    t, s = q.shape[0], k.shape[0]
    qh, kh, vh = q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1)  # [H, *, D]
    if s == t:
        out = F.scaled_dot_product_attention(qh, kh, vh, is_causal=True, scale=scale)
    else:
        start = s - t
        allowed = (
            torch.arange(s, device=q.device)[None, :] <= (start + torch.arange(t, device=q.device))[:, None]
        )
        out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=allowed, scale=scale)
    return out.transpose(0, 1)
