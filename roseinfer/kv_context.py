"""The KV contexts the model runs with: decode (one new token per sequence; eager, or static for CUDA graphs)
and prefill (packed prompts)."""

from __future__ import annotations

import contextlib

import numpy as np
import torch
import torch.nn.functional as F

from roseinfer.attention import decode_bias, gather_kv, paged_decode_attention
from roseinfer.block_manager import BlockManager
from roseinfer.kv_cache import KVCache, TokenSlots, token_slots, write_slots
from roseinfer.sequence import Sequence


class _DecodeAttention:
    """Attention of one new token per sequence over its past tokens, read through the block table."""

    cache: KVCache  # this rank's key/value tensors
    block_tables: torch.Tensor  # [L, B, M]
    past_lens: torch.Tensor  # [B]
    scale: float
    paged_attn: bool  # the Triton kernel (CUDA); the torch reference otherwise
    bias: torch.Tensor | None = None

    append_in_attention = False  # the attention kernel writes the new K/V (then `append` wrote nothing)
    split_attention = False  # small batches: the past split over several programs (`kernels.split_attention`)
    split_serial_blocks: int | None = None  # pasts this short unsplit (None: `pick_serial_blocks`)
    # one-pass kernel: its tile by the programs' count, e.g. 16 past tokens an iteration on one warp from 768
    # (`pick_attention_tile`); False: whole blocks, four warps, two stages
    attention_chunks = True
    # where the one-pass kernel would run: the CUDA kernel whose K/V tiles come by bulk copy, where it fits and is
    # built (`roseinfer.cuda_ext.paged_attn`); False: the Triton kernel
    cuda_attention = False
    cuda_attention_stages: int | None = None  # its tiles in flight (None: `paged_attn.pick_stages`)
    # whether it fits this step's operands: asked at the first layer, whose q, k, v views, cache, table row and
    # lengths are laid out as every layer's (the check costs about 9 us on a CPU, a layer of an eager step)
    _cuda_fits: bool | None = None

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if self.paged_attn:
            from roseinfer.kernels.paged_attention import paged_decode_attention_triton, pick_attention_tile
            from roseinfer.kernels.pdl import pdl_attention_release
            from roseinfer.kernels.split_attention import (
                pick_serial_blocks,
                pick_splits,
                split_decode_attention_triton,
            )

            table = self.block_tables[layer]  # [B, M]
            splits = pick_splits(q.shape[0], q.shape[1], table.shape[1]) if self.split_attention else 1
            if splits > 1:
                serial = self.split_serial_blocks
                if serial is None:
                    serial = pick_serial_blocks(q.shape[0], q.shape[1])
                return split_decode_attention_triton(
                    q, k, v, self.cache.k_caches[layer], self.cache.v_caches[layer], table, self.past_lens,
                    self.scale, splits, append=self.append_in_attention, serial_blocks=serial,
                )  # fmt: skip
            k_cache = self.cache.k_caches[layer]  # [N, H, BLOCK, D]
            v_cache = self.cache.v_caches[layer]
            if self.cuda_attention:
                from roseinfer.cuda_ext import paged_attn

                if self._cuda_fits is None:
                    self._cuda_fits = paged_attn.fits(q, k, v, k_cache, v_cache, table, self.past_lens)
                if self._cuda_fits:
                    return paged_attn.paged_decode_attention_cuda(
                        q, k, v, k_cache, v_cache, table, self.past_lens, self.scale,
                        append=self.append_in_attention, stages=self.cuda_attention_stages,
                    )  # fmt: skip
            tile = pick_attention_tile(
                q.shape[0] * q.shape[1], k_cache.shape[2], self.attention_chunks, pdl_attention_release()
            )
            return paged_decode_attention_triton(
                q, k, v, k_cache, v_cache, table, self.past_lens, self.scale, tile,
                append=self.append_in_attention,
            )  # fmt: skip
        if self.bias is None:  # [B*H, 1, M*BLOCK], computed once and shared by every layer of the step
            k0 = self.cache.k_caches[0]
            width = self.block_tables.shape[2] * self.cache.block_size
            self.bias = decode_bias(self.past_lens, width, k0.shape[1], k0.dtype)
        return paged_decode_attention(
            q,
            k,
            v,
            self.cache.k_caches[layer],
            self.cache.v_caches[layer],
            self.block_tables[layer],
            self.past_lens,
            self.scale,
            self.bias,
        )


class DecodeKV(_DecodeAttention):
    """Eager decode: append each sequence's new token to its blocks (allocating on rollover), then attend."""

    def __init__(
        self,
        mgr: BlockManager,
        cache: KVCache,
        seqs: list[Sequence],
        block_tables: torch.Tensor,  # [L, B, M]
        past_lens: torch.Tensor,  # [B]
        scale: float,
        batched_append: bool,
        paged_attn: bool = False,
        attention_chunks: bool = True,  # the one-pass kernel's tile rule (`pick_attention_tile`)
        cuda_attention: bool = False,  # the CUDA one-pass kernel where it fits (`roseinfer.cuda_ext.paged_attn`)
    ) -> None:
        self.mgr = mgr
        self.cache = cache
        self.seqs = seqs
        self.block_tables = block_tables
        self.past_lens = past_lens
        self.scale = scale
        self.batched_append = batched_append
        self.paged_attn = paged_attn
        self.attention_chunks = attention_chunks
        self.cuda_attention = cuda_attention
        self.slots: TokenSlots | None = None

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        # k, v: [B, H, D]
        if (
            self.slots is None
        ):  # the first layer's call decides every slot (one pool); the others write there too
            self.slots = token_slots(self.mgr, [s.block_ids for s in self.seqs], self.batched_append)
        write_slots(self.cache, layer, self.slots, k, v)


class StaticDecodeKV(_DecodeAttention):
    """Decode with every index already on the device and no host work, so the step can be captured in a CUDA graph.

    The runner reserved each sequence's slot for its new token before the step (`ModelRunner`):
    token `past` of a sequence, which lies in block `table[past // BLOCK]` at position `past % BLOCK`. The
    slots are read from the block table here, on the device, once per step.
    """

    def __init__(
        self,
        cache: KVCache,
        block_tables: torch.Tensor,  # [L, B, M], full width M
        past_lens: torch.Tensor,  # [B]
        scale: float,
        paged_attn: bool,
        in_graph: bool = False,  # the step is (or warms up for) a CUDA graph: no per-launch cost
        min_batch: int | None = None,  # Triton append from this batch size (None: the cache's threshold)
        append_in_attention: bool = True,  # let the attention kernel write the new K/V where it can
        split_attention: bool = False,  # small batches: the split-context attention kernel
        split_serial_blocks: int | None = None,  # its rule for short pasts (None: `pick_serial_blocks`)
        attention_chunks: bool = True,  # the one-pass kernel's tile rule (`pick_attention_tile`)
        cuda_attention: bool = False,  # the CUDA one-pass kernel where it fits (`roseinfer.cuda_ext.paged_attn`)
        cuda_attention_stages: int | None = None,  # its tiles in flight (None: `paged_attn.pick_stages`)
    ) -> None:
        self.cache = cache
        self.block_tables = block_tables
        self.past_lens = past_lens
        self.scale = scale
        self.paged_attn = paged_attn
        b = past_lens.shape[0]
        if min_batch is None:
            min_batch = cache.triton_min_batch_graph if in_graph else cache.triton_min_batch
        self.triton = cache.use_triton and b >= min_batch
        # Where the Triton append applies and the Triton attention runs, the attention kernel does the append:
        # it reads the new K/V anyway and the slot is in the table (one kernel per layer fewer).
        self.append_in_attention = self.triton and paged_attn and append_in_attention
        self.split_attention = split_attention
        self.split_serial_blocks = split_serial_blocks
        self.attention_chunks = attention_chunks
        self.cuda_attention = cuda_attention
        self.cuda_attention_stages = cuda_attention_stages
        self.slot_blocks: torch.Tensor | None = None  # [L, B], worked out by the first `append` that needs it
        self.slot_pos: torch.Tensor | None = None  # [B]

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        # k, v: [B, H, D]
        if self.append_in_attention:
            return  # written by `attend`
        if self.slot_blocks is None:
            rows = torch.arange(k.shape[0], device=k.device)
            bs = self.cache.block_size
            self.slot_blocks = self.block_tables[:, rows, self.past_lens // bs].contiguous()
            self.slot_pos = self.past_lens % bs
        if self.triton:
            from roseinfer.kernels.kv_append import MODE_IDENTITY, kv_append_triton

            kv_append_triton(
                self.cache.k_caches[layer], self.cache.v_caches[layer], k, v, self.slot_blocks[layer], self.slot_pos,
                mode=MODE_IDENTITY,
            )  # fmt: skip
        else:
            self.cache.k_caches[layer][self.slot_blocks[layer], :, self.slot_pos] = k
            self.cache.v_caches[layer][self.slot_blocks[layer], :, self.slot_pos] = v


@contextlib.contextmanager
def prefill_attention_backends(device: torch.device):
    """The prefill's attention without cuDNN's (CUDA): torch 2.11 picks cuDNN first for these shapes on Hopper,
    and cuDNN builds an execution graph for each new shape of a batch of prompts, 70 ms to 1 s on the H200, so
    every new (prompts, length) pair of a serving load stalled the engine that long (scripts/probe_prefill.py,
    docs/BENCHMARKS.md, session 22). torch's next choices (flash, memory-efficient, math) build nothing. The flag
    is process-wide, so it is put back after the prefill: a program around the engine keeps its own choice."""
    if device.type != "cuda" or not torch.backends.cuda.cudnn_sdp_enabled():
        yield
        return
    torch.backends.cuda.enable_cudnn_sdp(False)
    try:
        yield
    finally:
        torch.backends.cuda.enable_cudnn_sdp(True)


class PrefillKV:
    """Prefill: tokens of several sequences packed into one [T] batch; sequence i owns rows spans[i].

    Where every token's key/value goes is worked out once for all layers (one host-to-device copy); each layer
    then writes its keys and values in one indexed write each. Sequences without a cached prefix share one causal
    attention call per bucket of similar lengths (`pad_buckets`), right-padded to the bucket's longest: query row j
    sees keys 0..j, all of its own sequence, so the padding needs no mask, and the padded rows' outputs are
    dropped. One call per distinct length made a batch of 6 short prompts of different lengths 72 attention calls
    a prefill, 15.7 ms on the H200 against 5 ms (docs/BENCHMARKS.md, session 22). Sequences after a prefix-cache
    hit (`start` > 0) read their cached prefix back and share a call with those of the same start and length.
    """

    def __init__(
        self, mgr: BlockManager, cache: KVCache, seqs: list[Sequence], starts: list[int], scale: float
    ) -> None:
        self.cache = cache
        self.scale = scale
        self.cow = 0
        spans: list[tuple[int, int]] = []
        blocks, slots = [], []
        offset = 0
        for seq, start in zip(seqs, starts):
            n = seq.num_tokens - start
            spans.append((offset, offset + n))
            offset += n
            b, s, cow = mgr.prompt_slots(seq.block_ids, start, seq.num_tokens)
            blocks.append(b)
            slots.append(s)
            self.cow += cow
        device = cache.k_caches[0].device
        self.tokens = offset  # T: the packed rows of real tokens
        self.blocks = torch.from_numpy(np.concatenate(blocks)).to(device)  # [T], the same in every layer
        self.slots = torch.from_numpy(np.concatenate(slots)).to(device)  # [T]
        by_shape: dict[tuple[int, int], list[int]] = {}
        fresh = []  # sequences without a cached prefix, in packed order
        for i, (start, (a, b)) in enumerate(zip(starts, spans)):
            if start == 0:
                fresh.append(i)
            else:
                by_shape.setdefault((start, b - a), []).append(i)
        # (start, sequences G, padded length n, rows to gather [G*n], prefix tables [G, NB] and mask [n, start+n]
        # when start > 0, the rows of the [G*n] output to keep [T'] (None: all), where they go in the packed
        # output [T'])
        self.groups: list[tuple] = []
        for bucket in pad_buckets([spans[i][1] - spans[i][0] for i in fresh]):
            members = [fresh[j] for j in bucket]
            n = max(spans[i][1] - spans[i][0] for i in members)
            gather, keep, dest = [], [], []
            for k, i in enumerate(members):
                a, b = spans[i]
                gather += range(a, b)
                gather += [a] * (n - (b - a))  # padding: any row of its own (its output is dropped)
                keep += range(k * n, k * n + b - a)
                dest += range(a, b)
            padded = len(keep) < len(gather)
            self.groups.append(
                (0, len(members), n, torch.tensor(gather, device=device), None, None,
                 torch.tensor(keep, device=device) if padded else None, torch.tensor(dest, device=device))
            )  # fmt: skip
        for (start, n), members in by_shape.items():
            rows = torch.tensor([r for i in members for r in range(*spans[i])], device=device)
            nb = -(-start // mgr.block_size)
            tables = np.array([seqs[i].block_ids[:nb] for i in members], dtype=np.int64)
            tables = torch.from_numpy(tables).to(device)
            # new token j (position start + j) sees positions 0..start + j
            mask = (
                torch.arange(start + n, device=device)[None, :]
                <= start + torch.arange(n, device=device)[:, None]
            )
            self.groups.append((start, len(members), n, rows, tables, mask, None, rows))
        # one call whose kept rows are the whole packed batch in order: its output is the answer as it is
        self.whole = len(self.groups) == 1 and len(fresh) == len(seqs)

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        # k, v: [T_pad, H, D] packed, the real tokens' T rows first (the model's rows may be padded:
        # prefill_shapes.py)
        self.cache.k_caches[layer][self.blocks, :, self.slots] = k[: self.tokens]
        self.cache.v_caches[layer][self.blocks, :, self.slots] = v[: self.tokens]

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        """q, k, v: [T_pad, H, D] -> [T_pad, H, D]: the real rows' attention; padding rows (T_pad > T) are zeros,
        and no real row reads them."""
        padded = q.shape[0] > self.tokens
        out = None if self.whole and not padded else torch.empty_like(q)  # [T_pad, H, D]
        _, h, d = q.shape
        for start, g, n, rows, tables, mask, keep, dest in self.groups:
            # [G*n, H, D] -> [G, H, n, D]
            qg, kg, vg = (x.index_select(0, rows).view(g, n, h, d).transpose(1, 2) for x in (q, k, v))
            if tables is None:
                og = F.scaled_dot_product_attention(qg, kg, vg, is_causal=True, scale=self.scale)
            else:
                past_k = gather_kv(self.cache.k_caches[layer], tables)[:, :, :start]  # [G, H, start, D]
                past_v = gather_kv(self.cache.v_caches[layer], tables)[:, :, :start]
                keys, values = torch.cat([past_k, kg], dim=2), torch.cat([past_v, vg], dim=2)
                og = F.scaled_dot_product_attention(qg, keys, values, attn_mask=mask, scale=self.scale)
            og = og.transpose(1, 2).reshape(g * n, h, d)
            if keep is not None:
                og = og.index_select(0, keep)  # [T', H, D]: the padding's rows dropped
            if out is None:
                return og
            out.index_copy_(0, dest, og)
        if padded:
            out[self.tokens :].zero_()
        return out


def pad_buckets(lengths: list[int]) -> list[list[int]]:
    """The fresh sequences (their lengths, in packed order) in buckets that each attend in one padded call: the
    longest first, each bucket taking the next longest while its padded rows stay at most twice its real ones
    (a 1,000-token prompt does not pad seven 5-token ones to its length). Indices into `lengths`, each bucket in
    packed order."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    buckets: list[list[int]] = []
    longest = real = 0
    for i in order:
        if buckets and (len(buckets[-1]) + 1) * longest <= 2 * (real + lengths[i]):
            buckets[-1].append(i)
            real += lengths[i]
        else:
            buckets.append([i])
            longest = real = lengths[i]
    return [sorted(b) for b in buckets]
