"""The host block tables (`roseinfer.block_tables`): a batch of many fresh rows written from its block lists in one
pass gives the buffer the per-sequence cached rows give, and both agree with the lists themselves."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from roseinfer.block_tables import FRESH_ROWS, BlockTables
from roseinfer.sequence import SamplingParams, Sequence

L, M, B_MAX, PAD = 3, 6, 80, 7


def sequences(block_lists):
    seqs = []
    for i, blocks in enumerate(block_lists):
        seq = Sequence(i, [1], SamplingParams(max_new_tokens=4), 0)
        seq.block_ids = list(blocks)
        seqs.append(seq)
    return seqs


def expected(block_lists, pad_to):
    out = np.zeros((pad_to, L, M), dtype=np.int64)
    for b, blocks in enumerate(block_lists):
        out[b, :, : len(blocks)] = blocks
    out[len(block_lists) :] = PAD
    return out


block_list = st.lists(st.integers(8, 10_000), min_size=1, max_size=M)


@pytest.mark.parametrize("lo, hi", [(1, FRESH_ROWS), (FRESH_ROWS + 1, B_MAX - 4)])  # cached rows / one pass
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_a_table_built_holds_the_block_lists_both_ways(lo, hi, data):
    # a new batch of up to FRESH_ROWS sequences stacks cached rows, a larger one writes the lists at once; a table
    # built, then grown by a block here and there (rollovers) and rebuilt, must hold exactly the lists either way
    block_lists = data.draw(st.lists(block_list, min_size=lo, max_size=hi))
    pad_to = len(block_lists) + data.draw(st.integers(0, 4))
    tables = BlockTables(L, B_MAX, M, torch.device("cpu"), pad_block=PAD)
    seqs = sequences(block_lists)
    width = tables.build(seqs, pad_to=pad_to)
    assert width == max(len(b) for b in block_lists)
    assert np.array_equal(tables.host_np[:pad_to], expected(block_lists, pad_to))
    for seq in seqs:
        if len(seq.block_ids) < M and data.draw(st.booleans()):
            seq.block_ids.append(data.draw(st.integers(8, 10_000)))
    tables.build(seqs, pad_to=pad_to)
    assert np.array_equal(tables.host_np[:pad_to], expected([s.block_ids for s in seqs], pad_to))


def test_a_large_batch_then_a_small_one_stacks_caught_up_rows():
    # rows the one-pass build skipped (no cached row, or one missing a block) are right when a batch with few fresh
    # rows stacks them
    tables = BlockTables(L, B_MAX, M, torch.device("cpu"), pad_block=PAD)
    lists = [[10 + i, 200 + i] for i in range(FRESH_ROWS + 8)]
    seqs = sequences(lists)
    for seq in seqs[:4]:
        tables.build([seq])  # a cached row of two blocks
        seq.block_ids.append(900 + seq.id)
    tables.build(seqs)
    small = seqs[:4] + seqs[-2:]
    tables.build(small, pad_to=8)
    assert np.array_equal(tables.host_np[:8], expected([s.block_ids for s in small], 8))
