"""A rank's KV cache: the key and value tensors of every layer, and the writes into them.

Per layer `k_caches[layer]`, `v_caches[layer]`: [N_BLOCKS, H, BLOCK, D], where H is this rank's heads (all of
them on one device; `n_head / tensor_parallel_size` of them, or one more, with tensor parallelism). Block ids,
refcounts and fill counts are the block manager's (`roseinfer.block_manager`), which every rank keeps alike;
this object only holds and writes the tensors, so with tensor parallelism each rank's cache is its own.

Writes on CUDA go through the Triton KV-append kernels where the switches allow (`ROSELLM_TRITON_KV_APPEND`,
`ROSELLM_TRITON_KV_APPEND_MIN_BATCH`, read here once), torch indexing elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from roseinfer import env
from roseinfer.block_manager import BlockManager
from roseinfer.kernels import triton_available


class KVCache:
    def __init__(
        self,
        num_layers: int,
        num_blocks: int,  # physical blocks, the pad block included (`BlockManager.num_physical`)
        block_size: int,
        num_heads: int,  # this rank's heads
        head_dim: int,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
    ) -> None:
        self.num_layers = num_layers
        self.block_size = block_size
        shape = (num_blocks, num_heads, block_size, head_dim)
        # zeros, not empty: on CPU, empty leaves the pages unmapped and the first write into each new block
        # page-faults, which showed up as a +3 ms kv.append_token spike at every rollover step (64 requests,
        # gpt2-tiny; see docs/BENCHMARKS.md). Committing the pool up front moves that cost to start-up.
        self.k_caches = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        self.v_caches = [torch.zeros(shape, dtype=dtype, device=device) for _ in range(num_layers)]
        # The Triton append path (CUDA only): index tensors are staged in reused per-layer buffers, pinned on the
        # host, so a step allocates no tensors. Per layer, because a layer's copy may still be in flight when the
        # next layer stages its own indices.
        e = env.reload()
        self.use_triton = torch.device(device).type == "cuda" and e.triton_kv_append and triton_available()
        self.triton_min_batch = e.triton_kv_append_min_batch
        # In captured steps (no Python launch cost): 1, unless the user set the threshold (see roseinfer.env).
        self.triton_min_batch_graph = e.triton_kv_append_min_batch if e.triton_kv_append_min_batch_set else 1
        self._stage_host: list[torch.Tensor] = []
        self._stage_dev: list[torch.Tensor] = []

    @property
    def is_cuda(self) -> bool:
        return self.k_caches[0].is_cuda

    def copy_block(self, src: int, dst: int) -> None:
        """A copy-on-write's data: block `src`'s keys and values into block `dst` in every layer (the block manager
        decides)."""
        for k, v in zip(self.k_caches, self.v_caches):
            k[dst].copy_(k[src])
            v[dst].copy_(v[src])

    def write_token(self, layer: int, block: int, pos: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """One sequence's new token (k, v: [H, D]) into slot `pos` of `block`."""
        self.k_caches[layer][block, :, pos] = k
        self.v_caches[layer][block, :, pos] = v

    def write_batch(
        self,
        layer: int,
        blocks: np.ndarray,  # [F] block of each written row
        pos: np.ndarray,  # [F] slot in it
        k: torch.Tensor,  # [B, H, D]
        v: torch.Tensor,
        rows: np.ndarray | None,  # [F] rows of k/v written (None: all B, in order)
    ) -> None:
        """Many sequences' new tokens in one write: the Triton kernel from its batch threshold, torch below."""
        if self.use_triton and len(blocks) >= self.triton_min_batch:
            self._write_triton(layer, k, v, blocks, pos, rows)
            return
        if rows is not None:
            index = torch.from_numpy(rows).to(k.device)
            k, v = k[index], v[index]
        blocks_t = torch.from_numpy(blocks).to(k.device, non_blocking=True)
        pos_t = torch.from_numpy(pos).to(k.device, non_blocking=True)
        self.k_caches[layer][blocks_t, :, pos_t] = k  # [F, H, D] into [N, H, BLOCK, D]
        self.v_caches[layer][blocks_t, :, pos_t] = v

    def _write_triton(
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


@dataclass
class TokenSlots:
    """Where an eager decode step writes each sequence's new token: decided once for the step (one block pool), the
    same slots in every layer."""

    blocks: np.ndarray  # [F] block of each row of the batched write
    pos: np.ndarray  # [F] its slot
    fast: np.ndarray | None  # [F] the batch rows those are (None: all B, in order)
    slow: list[tuple[int, int, int]]  # (row, block, slot) of the rows written one request at a time


def token_slots(mgr: BlockManager, block_ids_list: list[list[int]], batched: bool) -> TokenSlots:
    """Every sequence's slot for its new token. batched: the batch's slots at once, rollovers inside it, only
    copy-on-writes (and, with batched_rollover off, rollovers) row by row (`BlockManager.batch_slots`); else the
    earlier design, one request at a time (`token_slot`)."""
    if not batched:
        mgr.reset_append_counts()
        none = np.zeros(0, dtype=np.int64)
        return TokenSlots(
            none, none, None, [(i, *mgr.token_slot(ids)) for i, ids in enumerate(block_ids_list)]
        )
    blocks, pos, slow, fast = mgr.batch_slots(block_ids_list)
    return TokenSlots(blocks, pos, fast, [(i, *mgr.token_slot(block_ids_list[i])) for i in slow.tolist()])


def write_slots(cache: KVCache, layer: int, slots: TokenSlots, k: torch.Tensor, v: torch.Tensor) -> None:
    """One layer's new tokens (k, v: [B, H, D]) into their slots: the slow rows one request at a time, the rest in
    one write."""
    for i, block, pos in slots.slow:
        cache.write_token(layer, block, pos, k[i], v[i])
    if len(slots.blocks):
        cache.write_batch(layer, slots.blocks, slots.pos, k, v, slots.fast)
