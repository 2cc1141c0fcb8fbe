"""KV block accounting: per-layer block pools with refcounts, a prefix cache, copy-on-write and the slots of
appended tokens. No tensors live here.

Each layer has its own pool of `num_blocks` block ids of `block_size` token slots. A sequence owns one list of
block ids per layer. Every layer sees the same sequence of allocations, so the pools stay in lock-step; they are
kept apart because that is the layout the block tables and kernels index (one table per layer).

The keys and values live in a rank's `roseinfer.kv_cache.KVCache` (the model runner owns it, as nano-vllm keeps
accounting in the block manager and tensors in the model runner). With tensor parallelism every rank runs the
same accounting on the same inputs, so every rank hands out the same block ids while its cache holds only its
heads. Where accounting decides a copy-on-write, it tells the cache through `copy_block(layer, src, dst)`.

Free blocks sit in an LRU ordered dict. A free block that holds a full prompt block keeps its prefix-cache
entry until it is reused, so a later request with the same prefix takes it back without recomputing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from roseinfer.sequence import Sequence


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


class OutOfBlocks(RuntimeError):
    """The pool is empty; the scheduler frees blocks (preemption) before it retries."""


class BlockManager:
    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        copy_block: Callable[[int, int, int], None],
        prefix_cache: bool = True,
        batched_rollover: bool = True,
        pad_block: bool = False,
    ) -> None:
        """copy_block(layer, src, dst): copies a block's keys and values (the rank's cache does it) when a
        copy-on-write gives a sequence its own block."""
        self.num_layers = num_layers
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.copy_block = copy_block
        self.prefix_cache = prefix_cache
        self.batched_rollover = batched_rollover
        # With pad_block, one block beyond the pool (id num_blocks) is never handed out: the padding rows of a
        # CUDA-graph batch bucket write their throw-away keys/values there.
        self.pad_block = num_blocks if pad_block else None
        self.num_physical = num_blocks + (1 if pad_block else 0)  # blocks the cache tensors hold
        physical = self.num_physical
        # [L, N]: one row per layer, so a decode step can read or update every layer's entries in one numpy op.
        self.refcount = np.zeros((num_layers, physical), dtype=np.int32)
        self.fill = np.zeros((num_layers, physical), dtype=np.int64)  # tokens written per block
        self._free: list[OrderedDict[int, None]] = [
            OrderedDict.fromkeys(range(num_blocks)) for _ in range(num_layers)
        ]
        self._cached: list[dict[object, int]] = [{} for _ in range(num_layers)]  # prefix key -> block
        self._key_of: list[dict[int, object]] = [{} for _ in range(num_layers)]  # block -> prefix key
        # Counters of the last append call per layer (the engine logs layer 0's per decode step).
        self.last_rollovers = [0] * num_layers
        self.last_cow = [0] * num_layers
        self._layers = np.arange(num_layers)[:, None]  # [L, 1]: indexes a [L, B] array of blocks per layer

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

    def allocate_many(self, layer: int, n: int) -> list[int]:
        """`n` blocks at once (a decode step where many sequences roll over together)."""
        blocks = self._take(layer, n)
        self.refcount[layer, blocks] = 1
        self.fill[layer, blocks] = 0
        return blocks

    def _take(self, layer: int, n: int) -> list[int]:
        """Pop `n` free blocks (least recently freed first) and drop their cached prefixes; the caller sets
        their refcounts and fill counts."""
        free = self._free[layer]
        if len(free) < n:
            raise OutOfBlocks(f"layer {layer}: {n} KV blocks needed, {len(free)} of {self.num_blocks} free")
        blocks = [free.popitem(last=False)[0] for _ in range(n)]
        key_of, cached = self._key_of[layer], self._cached[layer]
        for block in blocks:
            key = key_of.pop(block, None)
            if key is not None:
                del cached[key]
        return blocks

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

    # -- sequences ---------------------------------------------------------------------------------------------
    def allocate_prompt(self, seq: Sequence) -> tuple[list[object], int]:
        """Blocks in every layer for all of `seq`'s tokens: the longest cached prefix shared, the rest new.
        Returns the prefix keys (`register_prompt` them once the blocks are written) and the blocks hit."""
        tokens = seq.all_ids
        keys = self.prefix_keys(tokens, self.block_size) if self.prefix_cache else []
        seq.block_ids = [self.match_prefix(layer, keys) for layer in range(self.num_layers)]
        hits = len(seq.block_ids[0])
        need = blocks_for(len(tokens), self.block_size)
        for layer in range(self.num_layers):
            while len(seq.block_ids[layer]) < need:
                seq.block_ids[layer].append(self.allocate(layer))
        seq.forget_table_row()
        return keys, hits

    def register_prompt(self, seq: Sequence, keys: list[object]) -> None:
        """Make `seq`'s full prompt blocks findable by later requests (their keys/values are written)."""
        for layer in range(self.num_layers):
            for i, key in enumerate(keys):
                self.register(layer, seq.block_ids[layer][i], key)

    def release(self, seq: Sequence) -> None:
        """Drop `seq`'s references to its blocks (finished or preempted); it holds no KV afterwards."""
        for layer, ids in enumerate(seq.block_ids):
            self.free(layer, ids)
        seq.block_ids = []
        seq.num_cached = 0
        seq.forget_table_row()

    def starting_a_block(self, seqs: list[Sequence]) -> list[Sequence]:
        """The sequences whose next token needs a new block now (their cached tokens fill the blocks they hold
        exactly; a block reserved ahead of the boundary, `roseinfer.decode_slots`, is held already)."""
        bs = self.block_size
        return [seq for seq in seqs if seq.num_cached == len(seq.block_ids[0]) * bs]

    def append_blocks(self, seqs: list[Sequence]) -> np.ndarray:
        """One new last block in every layer for each of `seqs` (a decode step's rollovers, allocated at once, or
        blocks reserved ahead of them). Returns the new blocks [L, len(seqs)]."""
        n = len(seqs)
        if not n:
            return np.zeros((self.num_layers, 0), dtype=np.int64)
        per_layer = []
        for layer in range(self.num_layers):
            blocks = self._take(layer, n)
            per_layer.append(blocks)
            for seq, block in zip(seqs, blocks):
                seq.block_ids[layer].append(block)
        new = np.array(per_layer, dtype=np.int64)  # [L, n]
        # Refcounts and fill counts of every layer in one write each (per layer or per block, a few blocks
        # reserved ahead cost more in numpy calls than in work).
        self.refcount[self._layers, new] = 1
        self.fill[self._layers, new] = 0
        return new

    def copy_shared_slots(self, seqs: list[Sequence], slot_blocks: np.ndarray) -> list[int]:
        """Copy-on-write where the block receiving a sequence's new token is shared (a partly filled prefix-cache
        block). slot_blocks: [L, B] block of each sequence's new token per layer. Returns the rows whose block
        lists changed."""
        layers, rows = np.nonzero(self.refcount[self._layers, slot_blocks] > 1)
        for layer, row in zip(layers, rows):
            self.copy_on_write(int(layer), seqs[row].block_ids[layer])
        return sorted(set(rows.tolist()))

    def fill_slots(self, slot_blocks: np.ndarray, past: np.ndarray) -> None:
        """Count each sequence's new token as written into its slot block (slot_blocks [L, B], past lengths [B]):
        the static decode step writes the keys/values on the device, from the block tables."""
        self.fill[self._layers, slot_blocks] = (past % self.block_size + 1)[None, :]

    def last_append_counts(self) -> tuple[int, int]:
        """(rollovers, copy-on-writes) of the last append call; layer 0's, as every layer sees the same."""
        return self.last_rollovers[0], self.last_cow[0]

    def reset_append_counts(self, layer: int) -> None:
        self.last_rollovers[layer] = self.last_cow[layer] = 0

    # -- slots of appended tokens -----------------------------------------------------------------------------
    def copy_on_write(self, layer: int, block_ids: list[int], index: int = -1) -> int:
        """Give the sequence its own copy of its shared block `block_ids[index]`; returns the new block."""
        old = block_ids[index]
        new = self.allocate(layer)
        self.copy_block(layer, old, new)
        self.fill[layer][new] = self.fill[layer][old]
        self.free(layer, [old])
        block_ids[index] = new
        return new

    def token_slot(self, layer: int, block_ids: list[int]) -> tuple[int, int]:
        """(block, position) of one sequence's new token, counted as written: a new block when the last is full,
        a copy when it is shared. The per-request path (and the slow path of the batch)."""
        rollovers = cow = 0
        if not block_ids or self.fill[layer][block_ids[-1]] == self.block_size:
            block_ids.append(self.allocate(layer))
            rollovers = 1
        elif self.refcount[layer][block_ids[-1]] > 1:
            self.copy_on_write(layer, block_ids)
            cow = 1
        block = block_ids[-1]
        pos = int(self.fill[layer][block])
        self.fill[layer][block] = pos + 1
        self.last_rollovers[layer] += rollovers
        self.last_cow[layer] += cow
        return block, pos

    def batch_slots(
        self, layer: int, block_ids_list: list[list[int]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """The slots of one new token per sequence of the batch, for one write of the whole batch.

        A sequence whose last block is full gets a new block inside the batch (its row then writes slot 0 of
        that block). Only a shared, partly filled last block (copy-on-write) is left to the per-request path
        (`token_slot`, called by the writer for each slow row), and, with batched_rollover off, so is a rollover
        (the earlier design). Returns (blocks [F], positions [F] of the fast rows, counted as written; the slow
        rows; the fast rows' indices, or None when every row is fast).
        """
        self.reset_append_counts(layer)
        fill, rc = self.fill[layer], self.refcount[layer]
        last = np.fromiter((ids[-1] for ids in block_ids_list), dtype=np.int64, count=len(block_ids_list))
        pos = fill[last]  # [B] slot each token goes to
        full = pos == self.block_size
        shared = (rc[last] > 1) & ~full
        slow = shared | full if not self.batched_rollover else shared
        if full.any() and self.batched_rollover:
            rows = np.flatnonzero(full)  # only the rows that roll over, not the batch
            for i, block in zip(rows, self.allocate_many(layer, len(rows))):
                block_ids_list[i].append(block)
                last[i] = block
            pos[full] = 0
            self.last_rollovers[layer] = int(full.sum())
        fast = None
        slow_rows = np.flatnonzero(slow)
        if len(slow_rows):
            fast = np.flatnonzero(~slow)
            last, pos = last[fast], pos[fast]
        fill[last] = pos + 1
        return last, pos, slow_rows, fast

    def prompt_slots(
        self, block_ids: list[list[int]], start: int, end: int
    ) -> tuple[np.ndarray, np.ndarray, int]:
        """Where tokens start..end-1 of one sequence go, in every layer; its blocks are already allocated.

        `block_ids` holds the sequence's block list per layer. Returns blocks [L, T] and slots [T] for the writes
        and how many copy-on-writes it took (a shared block that receives new tokens is copied first); the
        fill counts are updated here, the keys/values are written by the caller (one write per layer).
        """
        bs = self.block_size
        first = start // bs
        layers = np.arange(self.num_layers)
        cow = 0
        if first < len(block_ids[0]):
            # Only the block holding `start` can be shared and partly recomputed (full-prefix hits).
            firsts = np.fromiter((ids[first] for ids in block_ids), dtype=np.int64, count=self.num_layers)
            for layer in np.flatnonzero(self.refcount[layers, firsts] > 1):
                self.copy_on_write(int(layer), block_ids[layer], first)
                cow += 1
        table = np.array(block_ids, dtype=np.int64)  # [L, NB]
        positions = np.arange(start, end)
        touched = np.arange(first, (end - 1) // bs + 1)
        self.fill[layers[:, None], table[:, touched]] = np.minimum(bs, end - touched * bs)[None, :]
        return table[:, positions // bs], positions % bs, cow
