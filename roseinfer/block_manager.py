"""KV block accounting: one block pool with refcounts, a prefix cache, copy-on-write and the slots of appended
tokens. No tensors live here.

One pool of `num_blocks` block ids of `block_size` token slots serves every layer: a block id names the same
slot range in each layer's key and value tensors, and a sequence owns one list of block ids. Every layer holds the
same tokens, so per-layer pools would only repeat the same decisions once a layer (they moved in lock-step: 12
pools cost GPT-2 small 7 to 17x the host time of one per admission, rollover and release, and 2x per static decode
step; docs/BENCHMARKS.md, issue 42). The block tables keep one line per layer, all alike, for the kernels.

The keys and values live in a rank's `roseinfer.kv_cache.KVCache` (the model runner owns it, as nano-vllm keeps
accounting in the block manager and tensors in the model runner). With tensor parallelism every rank runs the
same accounting on the same inputs, so every rank hands out the same block ids while its cache holds only its
heads. Where accounting decides a copy-on-write, it tells the cache through `copy_block(src, dst)` (every layer).

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
        copy_block: Callable[[int, int], None],
        prefix_cache: bool = True,
        batched_rollover: bool = True,
        pad_block: bool = False,
    ) -> None:
        """copy_block(src, dst): copies a block's keys and values in every layer (the rank's cache does it) when a
        copy-on-write gives a sequence its own block. num_layers: the layers the block tables hold a line for."""
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
        self.refcount = np.zeros(self.num_physical, dtype=np.int32)  # [N]
        self.fill = np.zeros(self.num_physical, dtype=np.int64)  # [N] tokens written per block
        self._free: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))
        self._cached: dict[object, int] = {}  # prefix key -> block
        self._key_of: dict[int, object] = {}  # block -> prefix key
        # Counters of the last decode step's appends (the engine logs them per step).
        self.last_rollovers = 0
        self.last_cow = 0

    # -- pool ----------------------------------------------------------------------------------------------------
    def num_free(self) -> int:
        return len(self._free)

    def allocate(self) -> int:
        free = self._free
        if not free:
            raise OutOfBlocks(f"all {self.num_blocks} KV blocks are in use")
        block, _ = free.popitem(last=False)  # least recently freed first, so cached prefixes live longest
        key = self._key_of.pop(block, None)
        if key is not None:
            del self._cached[key]
        self.refcount[block] = 1
        self.fill[block] = 0
        return block

    def allocate_many(self, n: int) -> list[int]:
        """`n` blocks at once (a decode step where many sequences roll over together)."""
        blocks = self._take(n)
        self.refcount[blocks] = 1
        self.fill[blocks] = 0
        return blocks

    def _take(self, n: int) -> list[int]:
        """Pop `n` free blocks (least recently freed first) and drop their cached prefixes; the caller sets
        their refcounts and fill counts."""
        free = self._free
        if len(free) < n:
            raise OutOfBlocks(f"{n} KV blocks needed, {len(free)} of {self.num_blocks} free")
        blocks = [free.popitem(last=False)[0] for _ in range(n)]
        key_of, cached = self._key_of, self._cached
        for block in blocks:
            key = key_of.pop(block, None)
            if key is not None:
                del cached[key]
        return blocks

    def free(self, block_ids: list[int]) -> None:
        rc = self.refcount
        for block in block_ids:
            if rc[block] <= 0:
                raise RuntimeError(f"block {block} freed twice")
            rc[block] -= 1
            if rc[block] == 0:
                self._free[block] = None

    def share(self, block: int) -> int:
        """Take one more reference to a block (a prefix-cache hit, or a fork)."""
        if self.refcount[block] == 0:
            self._free.pop(block)
        self.refcount[block] += 1
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

    def match_prefix(self, keys: list[object]) -> list[int]:
        """The cached blocks for the longest run of leading keys, each with one more reference."""
        if not self.prefix_cache:
            return []
        hits: list[int] = []
        for key in keys:
            block = self._cached.get(key)
            if block is None:
                break
            hits.append(self.share(block))
        return hits

    def register(self, block: int, key: object) -> None:
        """Make a full block findable by later requests with the same prefix."""
        if not self.prefix_cache or key in self._cached or block in self._key_of:
            return
        self._cached[key] = block
        self._key_of[block] = key

    # -- sequences ---------------------------------------------------------------------------------------------
    def allocate_prompt(self, seq: Sequence) -> tuple[list[object], int]:
        """Blocks for all of `seq`'s tokens: the longest cached prefix shared, the rest new. Returns the prefix
        keys (`register_prompt` them once the blocks are written) and the blocks hit."""
        tokens = seq.all_ids
        keys = self.prefix_keys(tokens, self.block_size) if self.prefix_cache else []
        seq.block_ids = self.match_prefix(keys)
        hits = len(seq.block_ids)
        need = blocks_for(len(tokens), self.block_size)
        if need > hits:
            seq.block_ids += self.allocate_many(need - hits)
        seq.forget_table_row()
        return keys, hits

    def register_prompt(self, seq: Sequence, keys: list[object]) -> None:
        """Make `seq`'s full prompt blocks findable by later requests (their keys/values are written)."""
        for block, key in zip(seq.block_ids, keys):
            self.register(block, key)

    def release(self, seq: Sequence) -> None:
        """Drop `seq`'s references to its blocks (finished or preempted); it holds no KV afterwards."""
        self.free(seq.block_ids)
        seq.block_ids = []
        seq.num_cached = 0
        seq.forget_table_row()

    def starting_a_block(self, seqs: list[Sequence]) -> list[Sequence]:
        """The sequences whose next token needs a new block now (their cached tokens fill the blocks they hold
        exactly; a block reserved ahead of the boundary, `roseinfer.decode_slots`, is held already)."""
        bs = self.block_size
        return [seq for seq in seqs if seq.num_cached == len(seq.block_ids) * bs]

    def append_blocks(self, seqs: list[Sequence]) -> np.ndarray:
        """One new last block for each of `seqs` (a decode step's rollovers, allocated at once, or blocks reserved
        ahead of them). Returns the new blocks [len(seqs)]."""
        blocks = self.allocate_many(len(seqs)) if seqs else []
        for seq, block in zip(seqs, blocks):
            seq.block_ids.append(block)
        return np.array(blocks, dtype=np.int64)

    def copy_shared_slots(self, seqs: list[Sequence], slot_blocks: np.ndarray) -> list[int]:
        """Copy-on-write where the block receiving a sequence's new token is shared (a partly filled prefix-cache
        block). slot_blocks: [B] block of each sequence's new token. Returns the rows whose block lists changed."""
        rows = np.flatnonzero(self.refcount[slot_blocks] > 1).tolist()
        for row in rows:
            self.copy_on_write(seqs[row].block_ids)
        return rows

    def fill_slots(self, slot_blocks: np.ndarray, past: np.ndarray) -> None:
        """Count each sequence's new token as written into its slot block (slot_blocks [B], past lengths [B]):
        the static decode step writes the keys/values on the device, from the block tables."""
        self.fill[slot_blocks] = past % self.block_size + 1

    def last_append_counts(self) -> tuple[int, int]:
        """(rollovers, copy-on-writes) of the last decode step's appends."""
        return self.last_rollovers, self.last_cow

    def reset_append_counts(self) -> None:
        self.last_rollovers = self.last_cow = 0

    # -- slots of appended tokens -----------------------------------------------------------------------------
    def copy_on_write(self, block_ids: list[int], index: int = -1) -> int:
        """Give the sequence its own copy of its shared block `block_ids[index]`; returns the new block."""
        old = block_ids[index]
        new = self.allocate()
        self.copy_block(old, new)
        self.fill[new] = self.fill[old]
        self.free([old])
        block_ids[index] = new
        return new

    def token_slot(self, block_ids: list[int]) -> tuple[int, int]:
        """(block, position) of one sequence's new token, counted as written: a new block when the last is full,
        a copy when it is shared. The per-request path (and the slow path of the batch)."""
        if not block_ids or self.fill[block_ids[-1]] == self.block_size:
            block_ids.append(self.allocate())
            self.last_rollovers += 1
        elif self.refcount[block_ids[-1]] > 1:
            self.copy_on_write(block_ids)
            self.last_cow += 1
        block = block_ids[-1]
        pos = int(self.fill[block])
        self.fill[block] = pos + 1
        return block, pos

    def batch_slots(
        self, block_ids_list: list[list[int]]
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """The slots of one new token per sequence of the batch, for one write of the whole batch (per layer).

        A sequence whose last block is full gets a new block inside the batch (its row then writes slot 0 of
        that block). Only a shared, partly filled last block (copy-on-write) is left to the per-request path
        (`token_slot`, called by the writer for each slow row), and, with batched_rollover off, so is a rollover
        (the earlier design). Returns (blocks [F], positions [F] of the fast rows, counted as written; the slow
        rows; the fast rows' indices, or None when every row is fast).
        """
        self.reset_append_counts()
        fill, rc = self.fill, self.refcount
        last = np.fromiter((ids[-1] for ids in block_ids_list), dtype=np.int64, count=len(block_ids_list))
        pos = fill[last]  # [B] slot each token goes to
        full = pos == self.block_size
        shared = (rc[last] > 1) & ~full
        slow = shared | full if not self.batched_rollover else shared
        if full.any() and self.batched_rollover:
            rows = np.flatnonzero(full)  # only the rows that roll over, not the batch
            for i, block in zip(rows, self.allocate_many(len(rows))):
                block_ids_list[i].append(block)
                last[i] = block
            pos[full] = 0
            self.last_rollovers = int(full.sum())
        fast = None
        slow_rows = np.flatnonzero(slow)
        if len(slow_rows):
            fast = np.flatnonzero(~slow)
            last, pos = last[fast], pos[fast]
        fill[last] = pos + 1
        return last, pos, slow_rows, fast

    def prompt_slots(self, block_ids: list[int], start: int, end: int) -> tuple[np.ndarray, np.ndarray, int]:
        """Where tokens start..end-1 of one sequence go; its blocks are already allocated.

        Returns blocks [T] and slots [T] for the writes (the same in every layer) and how many copy-on-writes it
        took (a shared block that receives new tokens is copied first); the fill counts are updated here, the
        keys/values are written by the caller (one write per layer).
        """
        bs = self.block_size
        first = start // bs
        cow = 0
        if first < len(block_ids) and self.refcount[block_ids[first]] > 1:
            # Only the block holding `start` can be shared and partly recomputed (full-prefix hits).
            self.copy_on_write(block_ids, first)
            cow = 1
        table = np.array(block_ids, dtype=np.int64)  # [NB]
        positions = np.arange(start, end)
        touched = np.arange(first, (end - 1) // bs + 1)
        self.fill[table[touched]] = np.minimum(bs, end - touched * bs)
        return table[positions // bs], positions % bs, cow
