"""Continuous batching: FIFO admission into prefill batches, decode of everything running, preemption.

Requests wait in arrival order. Each engine step admits up to `prefill_max_batch_size` of them (never beyond
`max_batch_size` running) when the KV pool can hold their tokens, then decodes every running sequence once.
When a decode step would need more blocks than are free, the newest running sequence is preempted: its blocks
are freed and it goes back to the front of the queue, to be recomputed (prompt plus what it has generated)
when there is room. No request is ever dropped.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from roseinfer.block_manager import BlockManager, blocks_for
from roseinfer.config import EngineConfig
from roseinfer.sequence import Sequence, Status

__all__ = ["Scheduler", "blocks_for"]


@dataclass
class _BatchCounts:
    """What the decode checks look for in the running batch, counted over it: a sequence whose next token starts a
    block it does not hold, and one that finishes by length. An unchanged batch moves in lock-step (each launch
    caches one token of every sequence of it, each read emits one), so later values are read off its first
    sequence's progress instead of counted over the batch each step (at 512 sequences those counts were a quarter of
    the host's Python a step: docs/BENCHMARKS.md, session 66)."""

    batch: int  # `Scheduler._batch` when counted
    emitted: int  # the first sequence's output length when `left` was counted
    left: int  # the fewest tokens a sequence had left to emit then (exact while the batch is unchanged)
    cached: int = 0  # the first sequence's `num_cached` when the rooms were counted
    # The fewest free slots in a sequence's blocks then: a lower bound after (blocks reserved ahead only add room).
    room: int = 0
    starting: int = 0  # sequences with none then: their next token starts a block
    # The first sequence's `num_cached` before which `_blocks_needed` looks at every sequence instead (a staggered
    # batch, where counting the rooms again buys no step).
    look_until: int = 0


class Scheduler:
    def __init__(self, cfg: EngineConfig, mgr: BlockManager) -> None:
        self.cfg = cfg
        self.mgr = mgr
        self.num_blocks = mgr.num_blocks
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []
        self._batch = 0  # counts the changes to `running` (what keeps `_counted` true)
        self._counted: _BatchCounts | None = None

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def schedule_prefill(self) -> list[Sequence]:
        """Sequences to prefill now, in admission order; they join `running`."""
        room = min(self.cfg.prefill_max_batch_size, self.cfg.max_batch_size - len(self.running))
        if room <= 0 or not self.waiting:
            return []
        # Keep one block per running sequence in reserve so decode can roll over without preempting at once.
        budget = self.mgr.num_free() - len(self.running)
        candidates = list(self.waiting)
        if self.cfg.prefill_admission_policy == "shortest-first":
            candidates.sort(key=lambda s: s.num_tokens)
        batch: list[Sequence] = []
        for seq in candidates:
            if len(batch) == room:
                break
            need = blocks_for(seq.num_tokens, self.cfg.block_size) + 1
            if need > budget:
                if need > self.num_blocks:
                    raise RuntimeError(
                        f"request {seq.id} needs {need} KV blocks but the pool has {self.num_blocks}; raise num_blocks"
                    )
                if self.cfg.prefill_admission_policy == "fifo":
                    break  # strict FIFO: nobody overtakes the head of the queue
                continue
            budget -= need
            batch.append(seq)
        for seq in batch:
            self.waiting.remove(seq)
            seq.status = Status.RUNNING
            self.running.append(seq)
        self._batch += bool(batch)
        return batch

    def schedule_decode(self) -> tuple[list[Sequence], int]:
        """The batch to decode (every running sequence) and how many were preempted to make room: the newest
        go back to the queue until the free blocks cover every sequence whose next token starts a block."""
        preempted = 0
        while len(self.running) > 1 and self._blocks_needed() > self.mgr.num_free():
            self._preempt_newest()
            preempted += 1
        return list(self.running), preempted

    def can_follow(self, in_flight: list[Sequence]) -> bool:
        """Can the next decode step follow the one in flight on the device (the overlapped decode): the same batch,
        no admission, no sequence finishing by length with it, and no preemption?"""
        running = self.running
        if running != in_flight:  # a sequence finished (EOS) when the previous tokens were read
            return False
        if self.waiting and len(running) < self.cfg.max_batch_size:
            return False  # a request may be admitted: prefill first
        if self._tokens_left() <= 1:
            return False  # finishes by length with the step in flight
        return self._blocks_needed() <= self.mgr.num_free()

    def finish(self, seq: Sequence, reason: str) -> None:
        seq.status = Status.FINISHED
        seq.finish_reason = reason
        self.running.remove(seq)
        self._batch += 1
        self.mgr.release(seq)

    def _blocks_needed(self) -> int:
        """Blocks the next decode step takes: one per running sequence whose new token starts a block it does not
        hold yet (blocks reserved ahead of the boundary are held already)."""
        if not self.running:
            return 0
        c, first = self._count(), self.running[0]
        # Steps of this batch launched since its rooms were counted: each took one slot of every sequence.
        launched = first.num_cached - c.cached
        if launched and c.room - launched <= 0:  # a sequence may be out of room
            if first.num_cached < c.look_until:
                return len(self.mgr.starting_a_block(self.running))
            bought = c.room  # steps the last count could be read off for
            self._count_rooms(c)
            if bought <= 1 and c.room <= 1:
                # Two counts in a row good for a step at most: the sequences sit at staggered offsets in their
                # blocks, one at an edge nearly every step. Look at every one (a pass; a count of the rooms is two
                # passes' worth) for a block's worth of steps before counting again.
                c.look_until = first.num_cached + self.mgr.block_size
            launched = 0
        return c.starting if not launched else 0

    def _tokens_left(self) -> int:
        """The fewest tokens a running sequence has left to emit (its `max_new_tokens` less its output)."""
        c = self._count()
        return c.left - (len(self.running[0].output_ids) - c.emitted)

    def _count(self) -> _BatchCounts:
        """The running batch's counts (`_BatchCounts`; `running` is not empty), made again when the batch changed."""
        c = self._counted
        if c is None or c.batch != self._batch:
            running = self.running
            left = min(s.params.max_new_tokens - len(s.output_ids) for s in running)
            c = self._counted = _BatchCounts(self._batch, len(running[0].output_ids), left)
            self._count_rooms(c)
        return c

    def _count_rooms(self, c: _BatchCounts) -> None:
        bs = self.mgr.block_size
        # [B] free slots in the blocks each sequence holds
        rooms = [len(s.block_ids) * bs - s.num_cached for s in self.running]
        c.cached, c.room, c.starting = self.running[0].num_cached, min(rooms), rooms.count(0)

    def _preempt_newest(self) -> None:
        seq = self.running.pop()
        self._batch += 1
        seq.status = Status.WAITING
        seq.preemptions += 1
        self.waiting.appendleft(seq)
        self.mgr.release(seq)
