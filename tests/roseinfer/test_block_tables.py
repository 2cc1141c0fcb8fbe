"""The host block tables (`roseinfer.block_tables`): the static decode path's one-pass build of a batch of many fresh
sequences gives the buffer the per-sequence cached rows give, the eager path keeps its rows, and both agree with the
block lists themselves through rollovers, blocks written straight into the buffer and rows that lag."""

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


@pytest.mark.parametrize("one_pass", [False, True])  # the eager path's builds / the static path's
@pytest.mark.parametrize("lo, hi", [(1, FRESH_ROWS), (FRESH_ROWS + 1, B_MAX - 4)])
@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_a_table_built_holds_the_block_lists_both_ways(lo, hi, one_pass, data):
    # a new batch, built, then grown by a block here and there (rollovers) and built again, must hold exactly the
    # lists; only the static path's build of more than FRESH_ROWS fresh sequences is one pass, which makes no rows
    block_lists = data.draw(st.lists(block_list, min_size=lo, max_size=hi))
    pad_to = len(block_lists) + data.draw(st.integers(0, 4))
    tables = BlockTables(L, B_MAX, M, torch.device("cpu"), pad_block=PAD)
    seqs = sequences(block_lists)
    width = tables.build(seqs, pad_to=pad_to, one_pass_if_fresh=one_pass)
    assert width == max(len(b) for b in block_lists)
    assert np.array_equal(tables.host_np[:pad_to], expected(block_lists, pad_to))
    passed = one_pass and len(seqs) > FRESH_ROWS
    assert [s.table_row_blocks for s in seqs] == [-2 if passed else len(s.block_ids) for s in seqs]
    for seq in seqs:
        if len(seq.block_ids) < M and data.draw(st.booleans()):
            seq.block_ids.append(data.draw(st.integers(8, 10_000)))
    tables.build(seqs, pad_to=pad_to, one_pass_if_fresh=one_pass)  # none new now: the rows, made or caught up
    assert np.array_equal(tables.host_np[:pad_to], expected([s.block_ids for s in seqs], pad_to))
    assert [s.table_row_blocks for s in seqs] == [len(s.block_ids) for s in seqs]


def test_rows_lagging_several_blocks_catch_up_when_stacked():
    # the static path: four rows cached at two blocks; a batch of 20 new sequences written in one pass, its blocks
    # then written straight into the buffer (reserved ahead: put_blocks) while the lists grow, the four lists
    # growing by three blocks meanwhile; the next build of them all makes the 20 rows and catches the four up
    tables = BlockTables(L, B_MAX, M, torch.device("cpu"), pad_block=PAD)
    seqs = sequences([[10 + i, 200 + i] for i in range(FRESH_ROWS + 8)])
    lagging, wave = seqs[:4], seqs[4:]
    for seq in lagging:
        tables.build([seq], one_pass_if_fresh=True)  # few new rows: cached rows of two blocks
        assert seq.table_row_blocks == 2
    assert tables.build(wave, one_pass_if_fresh=True) == 2  # 20 new: one pass, no rows
    assert all(s.table_row_blocks == -2 for s in wave)
    for step in range(3):
        blocks = np.array([5_000 + 10 * s.id + step for s in wave])
        tables.put_blocks(np.arange(len(wave)), np.full(len(wave), 2 + step), blocks)
        for seq, block in zip(wave, blocks.tolist()):
            seq.block_ids.append(block)
        assert np.array_equal(tables.host_np[: len(wave)], expected([s.block_ids for s in wave], len(wave)))
        for seq in lagging:
            seq.block_ids.append(7_000 + 10 * seq.id + step)
    everyone = wave[:2] + lagging + wave[2:]
    assert tables.build(everyone, pad_to=len(everyone) + 3, one_pass_if_fresh=True) == 5
    assert np.array_equal(
        tables.host_np[: len(everyone) + 3], expected([s.block_ids for s in everyone], len(everyone) + 3)
    )
    assert [s.table_row_blocks for s in everyone] == [5] * len(everyone)


def test_the_eager_path_keeps_its_rows():
    # the eager path builds every step: a new batch of many sequences gets its cached rows, stacked from then on
    tables = BlockTables(L, B_MAX, M, torch.device("cpu"), pad_block=PAD)
    seqs = sequences([[10 + i] for i in range(FRESH_ROWS * 3)])
    tables.build(seqs)
    assert all(s.table_row_blocks == 1 for s in seqs)
    assert np.array_equal(tables.host_np[: len(seqs)], expected([s.block_ids for s in seqs], len(seqs)))
