"""The static decode path's host side: every new token's KV slot reserved before the step, so that the step
itself (a CUDA graph replay) is device work only.

Before a step the host gives each sequence the block its new token goes to, keeps the host block tables (padded
to the graph's bucket) in line with the block lists, and counts the token as written in the block manager's fill
counts. In most steps nothing but the fill counts moves: the same sequences in the same rows, none starting a
block; the tables on the device are still right and the slots are read from them there. Their number is known
ahead (`_quiet_steps`: until a row's token reaches a block's edge or its next block falls due), and those steps
do nothing else: batch 1's host time a step on the CPU machine 18.0 -> 11.7 us with the other cuts of session 65.

Rollovers: a sequence's next block is reserved during the half block of steps before its last block fills, a few
sequences per step (the batch over a quarter block's steps); the step that starts the block then only moves the
slots. The blocks are allocated right after a step is launched (`reserve_ahead`), while the GPU still has that
step and the one before it to run, and written into the host tables' rows (one numpy write, no restack) before
the next launch: the allocation (~40 us for four sequences on the CPU machine) is off the path from one step's
tokens to the next step's launch, which is what keeps the GPU fed. The tables go to the device only in a step that
starts a block (one copy per rollover, not one per reserving step). The earlier design allocated every block in
the step whose token starts it; when a whole lock-step batch started a block together that step took ~0.5 ms of
host time on the CPU machine, ~1 ms under nsys on the H100's host, and the GPU waited (docs/BENCHMARKS.md,
issue 15: ITL p99 1.576 -> 0.846 ms on workload (a)); it was retired with its switch (`--no-blocks-ahead`).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from roseinfer import tracing
from roseinfer.block_manager import BlockManager
from roseinfer.block_tables import BlockTables
from roseinfer.sequence import Sequence
from roseinfer.tracing import region


class DecodeSlots:
    def __init__(
        self,
        mgr: BlockManager,
        tables: BlockTables,
        host_buffers_free: Callable[[], None],  # waits until the last host-to-device copy read the tables
    ) -> None:
        self.mgr = mgr
        self.tables = tables
        self.host_buffers_free = host_buffers_free
        self.block_size = mgr.block_size
        # Reserve a sequence's next block once at most `horizon` free slots are left in its blocks.
        self.horizon = max(1, self.block_size // 2)
        # The batch the host tables hold now, its bucket rows, each sequence's slot block [B] and how many blocks
        # each holds [B]: only this class adds blocks to a sequence of that batch.
        self.batch: list[Sequence] = []
        self.rows = 0
        self.slots = np.zeros(0, dtype=np.int64)
        self.held = np.zeros(0, dtype=np.int64)
        self.past = np.zeros(0, dtype=np.int64)  # [B] past lengths the last `reserve` read
        # Blocks reserved ahead after the last launch, not yet in the host tables: rows [K] of the batch, each
        # block's index in its sequence's lists [K], the blocks [L, K].
        self.pending: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.unsent = False  # the host tables hold blocks the device's copy does not have yet
        # Steps ahead of this batch in which nothing but the fill counts moves (`_quiet_steps`), and whether the
        # last `reserve` was one of them (its `reserve_ahead` has nothing to do either).
        self.quiet = 0
        self.quiet_step = False

    def reserve(self, seqs: list[Sequence], rows: int) -> tuple[int, int, bool]:
        """Give every sequence the KV slot of its new token; the host tables padded to `rows`. Returns
        (sequences whose token starts a block, copy-on-writes, host tables changed)."""
        self.quiet_step = self.quiet > 0 and rows == self.rows and seqs == self.batch
        if self.quiet_step:
            # Each sequence of the batch is one token further (every launch of it is preceded by a reserve): no row
            # starts a block or is near the end of its blocks, nothing is pending (`_quiet_steps`).
            self.quiet -= 1
            self.past += 1
            self.mgr.fill_slots(self.slots, self.past)
            return 0, 0, False
        self.quiet = 0
        past = np.fromiter((s.num_cached for s in seqs), dtype=np.int64, count=len(seqs))  # [B]
        self.past = past
        rollovers = int(np.count_nonzero(past % self.block_size == 0))
        cow, changed = self._reserve_ahead(seqs, rows, past, rollovers)
        self.mgr.fill_slots(self.slots, past)
        return rollovers, cow, changed

    def _reserve_ahead(
        self, seqs: list[Sequence], rows: int, past: np.ndarray, rollovers: int
    ) -> tuple[int, bool]:
        same = rows == self.rows and seqs == self.batch
        if same:
            held = self.held
        else:
            held = np.fromiter((len(s.block_ids) for s in seqs), dtype=np.int64, count=len(seqs))  # [B]
        # Sequences whose token needs a block not reserved in time (just admitted, or a tight pool).
        starting = np.flatnonzero(held * self.block_size == past)
        if len(starting) or not same:
            # The block lists hold every block reserved ahead, so the rebuilt tables do too.
            cow = self._rebuild(seqs, rows, past, [seqs[i] for i in starting])
            held[starting] += 1
            self.held, self.pending, self.unsent = held, None, False
            return cow, True
        if self.pending is not None:
            self.host_buffers_free()
            self.tables.put_blocks(*self.pending)
            self.pending, self.unsent = None, True
        changed = False
        if rollovers:
            # Their blocks were reserved ahead: fresh, held by one sequence (no copy-on-write); only the slots move.
            self.slots = self._slot_blocks(seqs, past)
            # A block reserved ahead is first read on the device in the step whose token starts it, so the tables
            # go over then, once, with every block reserved since (not once per step that reserved some).
            changed, self.unsent = self.unsent, False
        return 0, changed

    def reserve_ahead(self, seqs: list[Sequence]) -> None:
        """After a step of `seqs` is launched (their `num_cached` counts its token): reserve the next block of the
        sequences that will need one soon; the next `reserve` writes them into the host tables."""
        if self.quiet_step or seqs != self.batch:
            return
        # [B] the next step's past lengths: `reserve` read them before this step, which adds one token.
        past = self.past + 1
        held = self.held
        room = held * self.block_size - past  # [B] free slots in the blocks held; 0: the next token needs one
        if room.min() > self.horizon:  # most steps: no block needed soon
            self.quiet = self._quiet_steps(past, room)
            return
        # Every launch is preceded by a `reserve`, which writes (or rebuilds past) what is pending.
        assert self.pending is None, "blocks reserved ahead twice without a step between"
        with region(tracing.RESERVE_BLOCKS_AHEAD):
            ahead = self._due(seqs, held, room, int(np.count_nonzero(room == 0)))
            if not len(ahead):
                return
            blocks = self.mgr.append_blocks([seqs[i] for i in ahead])  # [K]
        self.pending = (ahead, held[ahead].copy(), blocks)
        held[ahead] += 1

    def _quiet_steps(self, past: np.ndarray, room: np.ndarray) -> int:
        """How many of this batch's next steps, from the one at past lengths `past` [B] (free slots `room` [B]
        after its token) on, move nothing but the fill counts: no row's token starts a block (a past length at a
        block's edge, where the slots move) and no row's next block is due after it (at most `horizon` free
        slots). The host's Python is most of batch 1's host time on the GPU machine (docs/BENCHMARKS.md, session
        65); those steps skip it."""
        to_edge = -past % self.block_size  # [B] steps until a token starts a block (0: this one)
        # the step j from now (0: the next) leaves room - j - 1 free slots to its own reserve_ahead
        return int(min(to_edge.min(), room.min() - self.horizon - 1))

    def _due(self, seqs: list[Sequence], held: np.ndarray, room: np.ndarray, starting: int) -> np.ndarray:
        """Rows whose next block to reserve now: at most `horizon` free slots left, nearest first, a few per step
        (the whole batch in half the horizon), only if the sequence will write into it, and never the free
        blocks the scheduler keeps in reserve (one per running sequence)."""
        due = np.flatnonzero((room > 0) & (room <= self.horizon))
        if not len(due):
            return due
        budget = -(-len(seqs) // max(1, self.horizon // 2))
        budget = min(budget, self.mgr.num_free() - len(seqs) - starting)
        keep: list[int] = []
        for i in due[np.argsort(room[due], kind="stable")].tolist():
            if len(keep) >= budget:
                break
            seq = seqs[i]
            # The last token a sequence writes to the cache is its next-to-last one.
            if held[i] * self.block_size <= len(seq.prompt_ids) + seq.params.max_new_tokens - 2:
                keep.append(i)
        return np.array(keep, dtype=np.int64)

    def _rebuild(self, seqs: list[Sequence], rows: int, past: np.ndarray, new: list[Sequence]) -> int:
        """Allocate a new last block for each of `new`, rebuild the host tables for the batch and work out its
        slots (copy-on-write where a slot's block is shared). Returns the copy-on-writes."""
        mgr = self.mgr
        self.host_buffers_free()
        mgr.append_blocks(new)
        self.tables.build(seqs, pad_to=rows, one_pass_if_fresh=True)
        slots = self._slot_blocks(seqs, past)
        copied = mgr.copy_shared_slots(seqs, slots)  # shared, partly filled blocks
        if copied:
            for row in copied:
                seqs[row].forget_table_row()
            self.tables.build(seqs, pad_to=rows, one_pass_if_fresh=True)
            slots = self._slot_blocks(seqs, past)
        self.batch, self.rows, self.slots = list(seqs), rows, slots
        return len(copied)

    def _slot_blocks(self, seqs: list[Sequence], past: np.ndarray) -> np.ndarray:
        """[B] block that receives each sequence's new token, read from the host tables (layer 0's line: they are
        alike)."""
        return self.tables.host_np[np.arange(len(seqs)), 0, past // self.block_size]
