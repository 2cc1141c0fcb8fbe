"""Paged KV cache: per-layer block pools with refcounts, a prefix cache, copy-on-write, and batched appends.

Each layer has its own pool of `num_blocks` blocks of `block_size` token slots and its own cache tensors
`k_caches[layer]`, `v_caches[layer]`: [N_BLOCKS, H, BLOCK, D]. A sequence owns one list of block ids per layer.
Every layer sees the same sequence of allocations, so the pools stay in lock-step; they are kept apart
because that is the layout the block tables and kernels index (one table per layer).

Free blocks sit in an LRU ordered dict. A free block that holds a full prompt block keeps its prefix-cache
entry until it is reused, so a later request with the same prefix takes it back without recomputing.
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np
import torch

from roseinfer import env
from roseinfer.kernels import triton_available


class OutOfBlocks(RuntimeError):
    """The pool is empty; the scheduler frees blocks (preemption) before it retries."""


class KVBlockManager:
    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_heads: int,
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        prefix_cache: bool = True,
        batched_rollover: bool = True,
    ) -> None:
        self.num_layers = num_layers
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.prefix_cache = prefix_cache
        self.batched_rollover = batched_rollover
        shape = (num_blocks, num_heads, block_size, head_dim)
        # zeros, not empty: on CPU, empty leaves the pages unmapped and the first write into each new block
        # page-faults, which showed up as a +3 ms kv.append_token spike at every rollover step (64 requests,
        # gpt2-tiny; see docs/BENCHMARKS.md). Committing the pool up front moves that cost to start-up.
        self.k_caches = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v_caches = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.refcount = [np.zeros(num_blocks, dtype=np.int32) for _ in range(num_layers)]
        self.fill = [
            np.zeros(num_blocks, dtype=np.int64) for _ in range(num_layers)
        ]  # tokens written per block
        self._free: list[OrderedDict[int, None]] = [
            OrderedDict.fromkeys(range(num_blocks)) for _ in range(num_layers)
        ]
        self._cached: list[dict[object, int]] = [{} for _ in range(num_layers)]  # prefix key -> block
        self._key_of: list[dict[int, object]] = [{} for _ in range(num_layers)]  # block -> prefix key
        # Counters of the last append call per layer (the engine logs layer 0's per decode step).
        self.last_rollovers = [0] * num_layers
        self.last_cow = [0] * num_layers
        # The Triton append path (CUDA only): index tensors are staged in reused per-layer buffers, pinned on the
        # host, so a step allocates no tensors. Per layer, because a layer's copy may still be in flight when the
        # next layer stages its own indices.
        e = env.reload()
        self.use_triton = torch.device(device).type == "cuda" and e.triton_kv_append and triton_available()
        self.triton_min_batch = e.triton_kv_append_min_batch
        self._stage_host: list[torch.Tensor] = []
        self._stage_dev: list[torch.Tensor] = []

    # -- pool ----------------------------------------------------------------------------------------------------
    def num_free(self, layer: int = 0) -> int:
        return len(self._free[layer])

    def allocate(self, layer: int) -> int:
        free = self._free[layer]
        if not free:
            raise OutOfBlocks(f"layer {layer}: all {self.num_blocks} KV blocks are in use")
        block, _ = free.popitem(last=False)  # least recently freed first, so cached prefixes live longest
        key = self._key_of[layer].pop(block, None)
        if key is not None:
            del self._cached[layer][key]
        self.refcount[layer][block] = 1
        self.fill[layer][block] = 0
        return block

    def free(self, layer: int, block_ids: list[int]) -> None:
        rc = self.refcount[layer]
        for block in block_ids:
            if rc[block] <= 0:
                raise RuntimeError(f"layer {layer}: block {block} freed twice")
            rc[block] -= 1
            if rc[block] == 0:
                self._free[layer][block] = None

    def share(self, layer: int, block: int) -> int:
        """Take one more reference to a block (a prefix-cache hit, or a fork)."""
        if self.refcount[layer][block] == 0:
            self._free[layer].pop(block)
        self.refcount[layer][block] += 1
        return block

    # -- prefix cache --------------------------------------------------------------------------------------------
    @staticmethod
    def prefix_keys(token_ids: list[int], block_size: int) -> list[object]:
        """One key per full block of `token_ids`; a key names the block's tokens and everything before them."""
        keys: list[object] = []
        parent: object = None
        for start in range(0, len(token_ids) - block_size + 1, block_size):
            parent = (hash(parent), tuple(token_ids[start : start + block_size]))
            keys.append(parent)
        return keys

    def match_prefix(self, layer: int, keys: list[object]) -> list[int]:
        """The cached blocks for the longest run of leading keys, each with one more reference."""
        if not self.prefix_cache:
            return []
        hits: list[int] = []
        for key in keys:
            block = self._cached[layer].get(key)
            if block is None:
                break
            hits.append(self.share(layer, block))
        return hits

    def register(self, layer: int, block: int, key: object) -> None:
        """Make a full block findable by later requests with the same prefix."""
        if not self.prefix_cache or key in self._cached[layer] or block in self._key_of[layer]:
            return
        self._cached[layer][key] = block
        self._key_of[layer][block] = key

    # -- writes --------------------------------------------------------------------------------------------------
    def _copy_on_write(self, layer: int, block_ids: list[int]) -> int:
        """Give the sequence its own copy of its shared last block; returns the new block."""
        old = block_ids[-1]
        new = self.allocate(layer)
        self.k_caches[layer][new].copy_(self.k_caches[layer][old])
        self.v_caches[layer][new].copy_(self.v_caches[layer][old])
        self.fill[layer][new] = self.fill[layer][old]
        self.free(layer, [old])
        block_ids[-1] = new
        return new

    def append_token(self, layer: int, block_ids: list[int], k: torch.Tensor, v: torch.Tensor) -> None:
        """One sequence's new token (k, v: [H, D]); the per-request path (and the slow path of the batch)."""
        rollovers = cow = 0
        if not block_ids or self.fill[layer][block_ids[-1]] == self.block_size:
            block_ids.append(self.allocate(layer))
            rollovers = 1
        elif self.refcount[layer][block_ids[-1]] > 1:
            self._copy_on_write(layer, block_ids)
            cow = 1
        block = block_ids[-1]
        pos = int(self.fill[layer][block])
        self.k_caches[layer][block, :, pos] = k
        self.v_caches[layer][block, :, pos] = v
        self.fill[layer][block] = pos + 1
        self.last_rollovers[layer] += rollovers
        self.last_cow[layer] += cow

    def append_token_batch(
        self, layer: int, block_ids_list: list[list[int]], k: torch.Tensor, v: torch.Tensor
    ):
        """One new token for each sequence of the batch (k, v: [B, H, D]) in one write.

        A sequence whose last block is full gets a new block inside the batch (its row then writes slot 0 of
        that block). Only a shared, partly filled last block (copy-on-write) takes the per-request path, and,
        with batched_rollover off, so does a rollover (the earlier design).
        """
        self.last_rollovers[layer] = 0
        self.last_cow[layer] = 0
        fill, rc = self.fill[layer], self.refcount[layer]
        last = np.fromiter((ids[-1] for ids in block_ids_list), dtype=np.int64, count=len(block_ids_list))
        pos = fill[last]  # [B] slot each token goes to
        full = pos == self.block_size
        shared = (rc[last] > 1) & ~full
        slow = shared | full if not self.batched_rollover else shared
        if full.any() and self.batched_rollover:
            for i in np.flatnonzero(full):  # only the rows that roll over, not the batch
                block = self.allocate(layer)
                block_ids_list[i].append(block)
                last[i] = block
            pos[full] = 0
            self.last_rollovers[layer] = int(full.sum())
        fast = None
        if slow.any():
            fast = np.flatnonzero(~slow)
            for i in np.flatnonzero(slow):
                self.append_token(layer, block_ids_list[i], k[i], v[i])
            if len(fast) == 0:
                return
            last, pos = last[fast], pos[fast]
        if self.use_triton and len(last) >= self.triton_min_batch:
            self._append_triton(layer, k, v, last, pos, fast)
        else:
            if fast is not None:
                rows = torch.from_numpy(fast).to(k.device)
                k, v = k[rows], v[rows]
            blocks_t = torch.from_numpy(last).to(k.device, non_blocking=True)
            pos_t = torch.from_numpy(pos).to(k.device, non_blocking=True)
            self.k_caches[layer][blocks_t, :, pos_t] = k  # [B, H, D] into [N, H, BLOCK, D]
            self.v_caches[layer][blocks_t, :, pos_t] = v
        fill[last] = pos + 1

    def _append_triton(
        self, layer: int, k, v, last: np.ndarray, pos: np.ndarray, rows: np.ndarray | None
    ) -> None:
        """One Triton launch for K and V, the narrowest kernel that applies."""
        from roseinfer.kernels.kv_append import MODE_FULL_BATCH, MODE_GENERAL, MODE_IDENTITY, kv_append_triton

        n = len(last)
        if not self._stage_host or self._stage_host[0].shape[1] < n:
            cap = max(n, 256)
            self._stage_host = [
                torch.zeros(3, cap, dtype=torch.int64, pin_memory=True) for _ in range(self.num_layers)
            ]
            self._stage_dev = [
                torch.zeros(3, cap, dtype=torch.int64, device=k.device) for _ in range(self.num_layers)
            ]
        host, dev = self._stage_host[layer], self._stage_dev[layer]
        host[0, :n] = torch.from_numpy(last)
        host[1, :n] = torch.from_numpy(pos)
        if rows is not None:
            host[2, :n] = torch.from_numpy(rows)
            mode = MODE_GENERAL
        elif (pos == pos[0]).all():
            mode = MODE_FULL_BATCH
        else:
            mode = MODE_IDENTITY
        dev[:, :n].copy_(host[:, :n], non_blocking=True)
        kv_append_triton(
            self.k_caches[layer], self.v_caches[layer], k, v, dev[0, :n], dev[1, :n],
            dev[2, :n] if rows is not None else None, mode=mode,
        )  # fmt: skip

    def write_prompt(
        self, layer: int, block_ids: list[int], start: int, k: torch.Tensor, v: torch.Tensor
    ) -> int:
        """Write tokens start..start+T-1 of one sequence (k, v: [T, H, D]); its blocks are already allocated.

        Returns how many copy-on-writes it took (a shared block that receives new tokens is copied first).
        """
        cow = 0
        first = start // self.block_size
        if first < len(block_ids) and self.refcount[layer][block_ids[first]] > 1:
            # Only the block holding `start` can be shared and partly recomputed (full-prefix hits).
            tail = block_ids[: first + 1]
            self._copy_on_write(layer, tail)
            block_ids[first] = tail[-1]
            cow = 1
        t = k.shape[0]
        positions = torch.arange(start, start + t)
        table = torch.tensor(block_ids, dtype=torch.int64)
        blocks_t = table[positions // self.block_size].to(k.device)
        slots_t = (positions % self.block_size).to(k.device)
        self.k_caches[layer][blocks_t, :, slots_t] = k
        self.v_caches[layer][blocks_t, :, slots_t] = v
        end = start + t
        for j in range(first, (end - 1) // self.block_size + 1):
            self.fill[layer][block_ids[j]] = min(self.block_size, end - j * self.block_size)
        return cow
