"""Continuous batching: FIFO admission into prefill batches, decode of everything running, preemption.

Requests wait in arrival order. Each engine step admits up to `prefill_max_batch_size` of them (never beyond
`max_batch_size` running) when the KV pool can hold their tokens, then decodes every running sequence once.
When a decode step would need more blocks than are free, the newest running sequence is preempted: its blocks
are freed and it goes back to the front of the queue, to be recomputed (prompt plus what it has generated)
when there is room. No request is ever dropped.
"""

from __future__ import annotations

from collections import deque

from roseinfer.config import EngineConfig
from roseinfer.sequence import Sequence, Status


def blocks_for(num_tokens: int, block_size: int) -> int:
    return -(-num_tokens // block_size)


class Scheduler:
    def __init__(self, cfg: EngineConfig, num_blocks: int) -> None:
        self.cfg = cfg
        self.num_blocks = num_blocks
        self.waiting: deque[Sequence] = deque()
        self.running: list[Sequence] = []

    def add(self, seq: Sequence) -> None:
        self.waiting.append(seq)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    def admit(self, free_blocks: int) -> list[Sequence]:
        """Sequences to prefill now, in admission order; they join `running`."""
        room = min(self.cfg.prefill_max_batch_size, self.cfg.max_batch_size - len(self.running))
        if room <= 0 or not self.waiting:
            return []
        # Keep one block per running sequence in reserve so decode can roll over without preempting at once.
        budget = free_blocks - len(self.running)
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
        return batch

    def preempt_newest(self) -> Sequence:
        seq = self.running.pop()
        seq.status = Status.WAITING
        seq.preemptions += 1
        self.waiting.appendleft(seq)
        return seq

    def finish(self, seq: Sequence, reason: str) -> None:
        seq.status = Status.FINISHED
        seq.finish_reason = reason
        self.running.remove(seq)
