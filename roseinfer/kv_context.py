"""The two KV contexts the model runs with: decode (one new token per sequence) and prefill (packed prompts)."""

from __future__ import annotations

import torch

from roseinfer.attention import decode_bias, gather_kv, paged_decode_attention, prefill_attention
from roseinfer.block_manager import KVBlockManager
from roseinfer.sequence import Sequence


class DecodeKV:
    """Decode: append each sequence's new token to its blocks, attend over past tokens through the table."""

    def __init__(
        self,
        mgr: KVBlockManager,
        seqs: list[Sequence],
        block_tables: torch.Tensor,  # [L, B, M]
        past_lens: torch.Tensor,  # [B]
        scale: float,
        batched_append: bool,
        paged_attn: bool = False,
    ) -> None:
        self.mgr = mgr
        self.seqs = seqs
        self.block_tables = block_tables
        self.past_lens = past_lens
        self.scale = scale
        self.batched_append = batched_append
        self.paged_attn = paged_attn  # the Triton kernel (CUDA); the torch reference otherwise
        k0 = mgr.k_caches[0]
        # [B*H, 1, M*BLOCK], shared by every layer of the step
        self.bias = decode_bias(past_lens, block_tables.shape[2] * mgr.block_size, k0.shape[1], k0.dtype)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        # k, v: [B, H, D]
        if self.batched_append:
            self.mgr.append_token_batch(layer, [s.block_ids[layer] for s in self.seqs], k, v)
        else:
            self.mgr.last_rollovers[layer] = self.mgr.last_cow[layer] = 0
            for i, seq in enumerate(self.seqs):
                self.mgr.append_token(layer, seq.block_ids[layer], k[i], v[i])

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.paged_attn:
            from roseinfer.kernels.paged_attention import paged_decode_attention_triton

            return paged_decode_attention_triton(
                q, k, v, self.mgr.k_caches[layer], self.mgr.v_caches[layer], self.block_tables[layer],
                self.past_lens, self.scale,
            )  # fmt: skip
        return paged_decode_attention(
            q,
            k,
            v,
            self.mgr.k_caches[layer],
            self.mgr.v_caches[layer],
            self.block_tables[layer],
            self.past_lens,
            self.scale,
            self.bias,
        )


class PrefillKV:
    """Prefill: tokens of several sequences packed into one [T] batch; sequence i owns rows spans[i]."""

    def __init__(self, mgr: KVBlockManager, seqs: list[Sequence], starts: list[int], scale: float) -> None:
        self.mgr = mgr
        self.seqs = seqs
        self.starts = starts  # first token each sequence computes (tokens before it come from the cache)
        self.scale = scale
        self.spans: list[tuple[int, int]] = []
        offset = 0
        for seq, start in zip(seqs, starts):
            n = seq.num_tokens - start
            self.spans.append((offset, offset + n))
            offset += n
        self.cow = 0

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        # k, v: [T, H, D] packed
        for seq, start, (a, b) in zip(self.seqs, self.starts, self.spans):
            self.cow += self.mgr.write_prompt(layer, seq.block_ids[layer], start, k[a:b], v[a:b])

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(q)  # [T, H, D]
        for seq, start, (a, b) in zip(self.seqs, self.starts, self.spans):
            if start == 0:
                keys, values = k[a:b], v[a:b]
            else:
                # The cached prefix is read back from its blocks: [H, start, D] -> [start, H, D].
                table = torch.tensor(seq.block_ids[layer], dtype=torch.int64, device=q.device)[None, :]
                past_k = gather_kv(self.mgr.k_caches[layer], table)[0, :, :start].transpose(0, 1)
                past_v = gather_kv(self.mgr.v_caches[layer], table)[0, :, :start].transpose(0, 1)
                keys, values = torch.cat([past_k, k[a:b]]), torch.cat([past_v, v[a:b]])
            out[a:b] = prefill_attention(q[a:b], keys, values, self.scale)
        return out
