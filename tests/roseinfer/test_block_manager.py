"""BlockManager (accounting) and KVCache (a rank's tensors): batched appends with rollover, copy-on-write, prefix
cache, accounting."""

import pytest
import torch

from roseinfer.block_manager import BlockManager, OutOfBlocks
from roseinfer.kv_cache import KVCache
from roseinfer.kv_cache import append_token_batch as append_batch

H, D, BS = 2, 4, 4


class Manager(BlockManager):
    """The accounting with its cache beside it, as a model runner holds them (`cache`, `append_token_batch`)."""

    def __init__(self, num_blocks=16, **kw):
        self.cache = KVCache(num_layers=2, num_blocks=num_blocks, block_size=BS, num_heads=H, head_dim=D)
        super().__init__(
            num_layers=2, num_blocks=num_blocks, block_size=BS, copy_block=self.cache.copy_block, **kw
        )

    def append_token_batch(self, layer, block_ids_list, k, v):
        append_batch(self, self.cache, layer, block_ids_list, k, v)


def manager(num_blocks=16, **kw):
    return Manager(num_blocks, **kw)


def read_token(mgr, layer, block_ids, t):
    return mgr.cache.k_caches[layer][block_ids[t // BS], :, t % BS]


@pytest.mark.parametrize("batched_rollover", [True, False])
def test_batch_append_rolls_over_inside_the_batch(batched_rollover):
    mgr = manager(batched_rollover=batched_rollover)
    seqs = [[mgr.allocate(0)] for _ in range(3)]
    written = [[] for _ in seqs]
    for step in range(9):  # crosses two block boundaries
        k = torch.randn(3, H, D) + 1.0  # never zero, so a missed write shows
        mgr.append_token_batch(0, seqs, k, k.clone())
        for i in range(3):
            written[i].append(k[i])
        expected = 3 if step in (4, 8) else 0
        assert mgr.last_rollovers[0] == expected
    for i, ids in enumerate(seqs):
        assert len(ids) == 3
        for t, k in enumerate(written[i]):
            assert torch.equal(read_token(mgr, 0, ids, t), k)


def test_copy_on_write_leaves_the_shared_block_untouched():
    mgr = manager()
    a = [mgr.allocate(0)]
    k0 = torch.randn(1, H, D)
    mgr.append_token_batch(0, [a], k0, k0)
    b = [mgr.share(0, a[0])]  # b forks a: both point at a partly filled block
    kb = torch.randn(1, H, D)
    mgr.append_token_batch(0, [b], kb, kb)
    assert mgr.last_cow[0] == 1 and b[0] != a[0]
    assert mgr.fill[0][a[0]] == 1 and mgr.fill[0][b[0]] == 2
    assert torch.equal(read_token(mgr, 0, b, 0), k0[0]) and torch.equal(read_token(mgr, 0, b, 1), kb[0])
    mgr.free(0, a)
    mgr.free(0, b)
    assert mgr.num_free(0) == mgr.num_blocks and mgr.refcount[0].sum() == 0


def test_prefix_cache_keeps_freed_blocks_until_reused():
    mgr = manager(num_blocks=4)
    tokens = list(range(8))
    keys = BlockManager.prefix_keys(tokens, BS)
    assert len(keys) == 2
    blocks = [mgr.allocate(0), mgr.allocate(0)]
    for blk, key in zip(blocks, keys):
        mgr.register(0, blk, key)
    mgr.free(0, blocks)
    assert mgr.match_prefix(0, keys) == blocks  # revived from the free list
    assert mgr.num_free(0) == 2
    assert mgr.match_prefix(0, BlockManager.prefix_keys([9] + tokens[1:], BS)) == []


def test_out_of_blocks_is_an_error_not_corruption():
    mgr = manager(num_blocks=1)
    mgr.allocate(0)
    with pytest.raises(OutOfBlocks):
        mgr.allocate(0)


def test_double_free_is_caught():
    mgr = manager()
    b = mgr.allocate(0)
    mgr.free(0, [b])
    with pytest.raises(RuntimeError, match="freed twice"):
        mgr.free(0, [b])
