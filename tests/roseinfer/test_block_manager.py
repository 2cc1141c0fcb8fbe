"""BlockManager (accounting, one pool for every layer) and KVCache (a rank's tensors): batched appends with rollover,
copy-on-write in every layer, prefix cache, accounting."""

import pytest
import torch

from roseinfer.block_manager import BlockManager, OutOfBlocks
from roseinfer.kv_cache import KVCache, token_slots, write_slots

H, D, BS = 2, 4, 4


class Manager(BlockManager):
    """The accounting with its cache beside it, as a model runner holds them (`cache`, `append_token_batch`)."""

    def __init__(self, num_blocks=16, **kw):
        self.cache = KVCache(num_layers=2, num_blocks=num_blocks, block_size=BS, num_heads=H, head_dim=D)
        super().__init__(
            num_layers=2, num_blocks=num_blocks, block_size=BS, copy_block=self.cache.copy_block, **kw
        )

    def append_token_batch(self, block_ids_list, k, v):
        """One decode step's new tokens (k, v: [B, L, H, D]): the slots decided once, written in every layer."""
        slots = token_slots(self, block_ids_list, batched=True)
        for layer in range(self.num_layers):
            write_slots(self.cache, layer, slots, k[:, layer], v[:, layer])


def manager(num_blocks=16, **kw):
    return Manager(num_blocks, **kw)


def read_token(mgr, layer, block_ids, t):
    return mgr.cache.k_caches[layer][block_ids[t // BS], :, t % BS]


@pytest.mark.parametrize("batched_rollover", [True, False])
def test_batch_append_rolls_over_inside_the_batch(batched_rollover):
    mgr = manager(batched_rollover=batched_rollover)
    seqs = [[mgr.allocate()] for _ in range(3)]
    written = [[] for _ in seqs]
    for step in range(9):  # crosses two block boundaries
        k = torch.randn(3, 2, H, D) + 1.0  # [B, L, H, D], never zero, so a missed write shows
        mgr.append_token_batch(seqs, k, k.clone())
        for i in range(3):
            written[i].append(k[i])
        expected = 3 if step in (4, 8) else 0
        assert mgr.last_rollovers == expected
    for i, ids in enumerate(seqs):
        assert len(ids) == 3
        for t, k in enumerate(written[i]):
            for layer in range(2):
                assert torch.equal(read_token(mgr, layer, ids, t), k[layer])


def test_copy_on_write_leaves_the_shared_block_untouched():
    mgr = manager()
    a = [mgr.allocate()]
    k0 = torch.randn(1, 2, H, D)
    mgr.append_token_batch([a], k0, k0)
    b = [mgr.share(a[0])]  # b forks a: both point at a partly filled block
    kb = torch.randn(1, 2, H, D)
    mgr.append_token_batch([b], kb, kb)
    assert mgr.last_cow == 1 and b[0] != a[0]
    assert mgr.fill[a[0]] == 1 and mgr.fill[b[0]] == 2
    for layer in range(2):  # the copy holds every layer's keys; a's block is as it was
        assert torch.equal(read_token(mgr, layer, b, 0), k0[0, layer])
        assert torch.equal(read_token(mgr, layer, b, 1), kb[0, layer])
        assert torch.equal(read_token(mgr, layer, a, 0), k0[0, layer])
    mgr.free(a)
    mgr.free(b)
    assert mgr.num_free() == mgr.num_blocks and mgr.refcount.sum() == 0


def test_prefix_cache_keeps_freed_blocks_until_reused():
    mgr = manager(num_blocks=4)
    tokens = list(range(8))
    keys = BlockManager.prefix_keys(tokens, BS)
    assert len(keys) == 2
    blocks = [mgr.allocate(), mgr.allocate()]
    for blk, key in zip(blocks, keys):
        mgr.register(blk, key)
    mgr.free(blocks)
    assert mgr.match_prefix(keys) == blocks  # revived from the free list
    assert mgr.num_free() == 2
    assert mgr.match_prefix(BlockManager.prefix_keys([9] + tokens[1:], BS)) == []


def test_out_of_blocks_is_an_error_not_corruption():
    mgr = manager(num_blocks=1)
    mgr.allocate()
    with pytest.raises(OutOfBlocks):
        mgr.allocate()


def test_double_free_is_caught():
    mgr = manager()
    b = mgr.allocate()
    mgr.free([b])
    with pytest.raises(RuntimeError, match="freed twice"):
        mgr.free([b])


@pytest.mark.parametrize("batched", [True, False])
def test_one_step_decides_each_slot_once_for_every_layer(batched):
    # The eager step's first layer decides the slots (a rollover, a copy-on-write); every layer then writes there,
    # whether the batch is written at once or one request at a time (the earlier design, batched_kv_append off).
    mgr = manager()
    full = [mgr.allocate()]
    mgr.fill[full[0]] = BS  # its last block is full: rolls over
    shared = [mgr.allocate()]
    mgr.fill[shared[0]] = 1
    other = [mgr.share(shared[0])]  # a fork: the next token copies the block
    lists = [full, shared]
    slots = token_slots(mgr, lists, batched)
    assert mgr.last_append_counts() == (1, 1) and len(full) == 2 and shared[0] != other[0]
    free_after = mgr.num_free()
    k = torch.randn(2, 2, H, D) + 1.0  # [B, L, H, D]
    for layer in range(2):
        write_slots(mgr.cache, layer, slots, k[:, layer], k[:, layer])
    assert mgr.num_free() == free_after  # the other layers allocated nothing
    for layer in range(2):
        assert torch.equal(read_token(mgr, layer, full, BS), k[0, layer])
        assert torch.equal(read_token(mgr, layer, shared, 1), k[1, layer])
