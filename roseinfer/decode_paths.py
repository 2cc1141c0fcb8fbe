"""The model runner's decode half: the three decode paths behind `ModelRunner.decode(seqs)`, which the runner
inherits (`DecodePaths` is its base class, on the buffers, graphs and block tables its `__init__` makes):
- eager: the block tables are built for the batch and the KV append allocates rollover blocks inside the step;
- static (`use_static_decode`; captured in CUDA graphs with `--cuda-graph`): every new token's slot is reserved
  on the host before the step, the inputs sit in static buffers and the step is a bucket's graph replay;
- overlapped (static, all greedy): the step is launched before the previous step's greedy
  tokens are read, so the GPU runs step k while the host emits step k-1's tokens and prepares step k+1. Each
  call then returns the tokens of the step launched in the call before it, and `drain()` reads the last one.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from roseinfer import tracing
from roseinfer.kv_context import DecodeKV
from roseinfer.sequence import Sequence, Status
from roseinfer.tracing import region


@dataclass
class DecodeOutput:
    batch: list[Sequence]  # the sequences this step launched (or, in a drain, read): the step log's record
    seqs: list[Sequence]  # whose tokens `token_ids` are: the batch, or the batch launched the call before
    token_ids: list[int]
    rollovers: int
    cow: int
    kv_tokens: int  # past tokens whose K/V the launched forward reads (for the HBM floor)
    launched: bool  # False for a drain: no forward pass


@dataclass
class _InFlight:
    """A decode step launched whose greedy tokens the host has not read yet."""

    seqs: list[Sequence]
    tokens: Callable[[], list[int]]  # the tokens, once `done` has fired
    done: torch.cuda.Event | None  # None on CPU, where the copy is synchronous


class DecodePaths:
    """`ModelRunner`'s decode step, eager, static or overlapped; the prefill and the sampling are the runner's."""

    # -- decode --------------------------------------------------------------------------------------------------
    def decode(self, seqs: list[Sequence]) -> DecodeOutput:
        """One decode step of `seqs` (with the overlapped decode: launch it, return the previous step's tokens)."""
        if self.graphs is None:
            out = self._decode_eager(seqs)
        elif self._all_greedy(seqs):
            out = self._decode_overlapped(seqs)
        else:
            # (never with a step in flight, whose tokens the next step of its rows would overwrite where the argmax
            # writes them into pinned memory: `roseinfer.host_tokens`; the scheduler drains it first)
            assert self._inflight is None, "a sampled step launched while another step's tokens are unread"
            rollovers, cow, logits, greedy, kv_tokens = self._launch_static(seqs, restage=True)
            self.slots.reserve_ahead(seqs)  # while the GPU runs this step
            with region(tracing.SAMPLE):
                token_ids = self._sample(logits, seqs, greedy)
            out = DecodeOutput(seqs, seqs, token_ids, rollovers, cow, kv_tokens, launched=True)
        if out.cow:  # a copy-on-write swapped a block id without changing the count
            for seq in seqs:
                seq.forget_table_row()
        return out

    def _all_greedy(self, seqs: list[Sequence]) -> bool:
        """Whether every sequence of `seqs` decodes greedily: counted once a batch, not every step (15 us of the
        host's Python at 512 sequences on the CPU machine). A batch is the same when it holds the same `Sequence`
        objects in the same order (they compare by identity), whose `SamplingParams` are frozen."""
        if seqs != self._greedy_batch:
            self._greedy_batch = list(seqs)
            self._all_greedy_batch = all(s.params.temperature == 0 for s in seqs)
        return self._all_greedy_batch

    def drain(self) -> DecodeOutput:
        """Launch nothing: read the tokens of the step in flight (the next step cannot follow it on the device)."""
        inflight, self._inflight = self._inflight, None
        with region(tracing.SAMPLE):
            token_ids = self._read_tokens(inflight)
        return DecodeOutput(inflight.seqs, inflight.seqs, token_ids, 0, 0, 0, launched=False)

    def drop_finished_in_flight(self) -> None:
        """Forget the step in flight once every sequence of it has finished: its tokens are not needed."""
        if self._inflight is not None and all(s.status is not Status.RUNNING for s in self._inflight.seqs):
            self._inflight = None

    def _decode_eager(self, seqs: list[Sequence]) -> DecodeOutput:
        batch = len(seqs)
        with region(tracing.BUILD_BLOCK_TABLES):
            width = self.tables.build(seqs)
        with region(tracing.H2D_BLOCK_TABLES):
            self.tables.to_device(batch)
            self._stage_inputs(seqs, batch)
        kv_tokens = sum(s.num_cached for s in seqs)
        with region(tracing.MODEL_FORWARD):
            tables = self.tables.device_view(batch, width)  # [L, B, width]
            ids, past = self.inputs[0, :batch], self.inputs[1, :batch]  # [B] each
            kv = DecodeKV(
                self.mgr, self.kv_cache, seqs, tables, past, self.scale, self.cfg.batched_kv_append,
                self.cfg.paged_attn, cuda_attention=self.cfg.cuda_paged_attn,
            )  # fmt: skip
            logits = self.model(ids, past, kv)  # [B, V]
        rollovers, cow = self.mgr.last_append_counts()
        with region(tracing.SAMPLE):
            token_ids = self._sample(logits, seqs)
        for seq in seqs:  # every one: the scheduler reads the batch's progress off its first
            seq.num_cached += 1
        return DecodeOutput(seqs, seqs, token_ids, rollovers, cow, kv_tokens, launched=True)

    def _decode_overlapped(self, seqs: list[Sequence]) -> DecodeOutput:
        """Launch this step, then read the tokens of the step launched in the call before (if any).

        The engine only decodes with a step in flight when the batch is the same and no sequence of it finishes by
        length with that step (`Scheduler.can_follow`); a sequence that meets EOS does finish when its token is
        read, and the token the following step already computed for it is dropped."""
        previous = self._inflight
        rollovers, cow, _, greedy, kv_tokens = self._launch_static(seqs, restage=previous is None)
        self._inflight = self._copy_tokens_out(seqs, greedy)
        self.slots.reserve_ahead(seqs)  # while the GPU runs this step (and the one before)
        if previous is None:
            return DecodeOutput(seqs, [], [], rollovers, cow, kv_tokens, launched=True)
        with region(tracing.SAMPLE):  # waits for the previous step on the GPU
            token_ids = self._read_tokens(previous)
        return DecodeOutput(seqs, previous.seqs, token_ids, rollovers, cow, kv_tokens, launched=True)

    def _launch_static(
        self, seqs: list[Sequence], restage: bool
    ) -> tuple[int, int, torch.Tensor, torch.Tensor, int]:
        """Static path: reserve every sequence's slot, stage what changed, replay the bucket's graph. restage:
        copy token ids and past lengths from the host (False: the previous step left them on the device).
        Returns (rollovers, copy-on-writes, logits [B, V], greedy tokens [B], past tokens read)."""
        batch = len(seqs)
        rows = self.graphs.bucket_for(batch)  # padded to the graph's batch bucket, tables at full width
        with region(tracing.BUILD_BLOCK_TABLES):
            rollovers, cow, changed = self._reserve_decode_slots(seqs, rows)
        with region(tracing.H2D_BLOCK_TABLES):
            if changed:
                self.tables.to_device(rows)
            if restage:
                self._stage_inputs(seqs, rows)
            if self._staged is not None and (changed or restage):
                self._staged.record()
        kv_tokens = int(self.slots.past.sum())  # [B] the past lengths `reserve` took: every num_cached
        with region(tracing.MODEL_FORWARD):
            logits, greedy = self.graphs.run(batch)
        # Every sequence of the batch moves one token: the scheduler reads the batch's progress off its first.
        for seq in seqs:
            seq.num_cached += 1  # the new token's K/V is written (or will be, by the step just launched)
        return rollovers, cow, logits, greedy, kv_tokens

    def _reserve_decode_slots(self, seqs: list[Sequence], rows: int) -> tuple[int, int, bool]:
        """Static path: every sequence's KV slot reserved before the step, host tables padded to `rows`
        (`roseinfer.decode_slots`); returns (rollovers, copy-on-writes, tables changed)."""
        return self.slots.reserve(seqs, rows)

    def _stage_inputs(self, seqs: list[Sequence], rows: int) -> None:
        """Token ids, past lengths and live flags into the input buffer; rows beyond the batch are padding
        (zeros)."""
        self._host_buffers_free()
        host = self.inputs_host.numpy()
        b = len(seqs)
        host[0, :b] = [s.last_token for s in seqs]
        host[1, :b] = [s.num_cached for s in seqs]
        host[2, :b] = 1
        host[:, b:rows] = 0
        if self.inputs is not self.inputs_host:
            views = self._input_views.get(rows)
            if views is None:  # slice once per batch size, not every step
                views = self._input_views[rows] = (self.inputs[:, :rows], self.inputs_host[:, :rows])
            views[0].copy_(views[1], non_blocking=True)

    def _host_buffers_free(self) -> None:
        """Wait until the last host-to-device copy has read the pinned buffers (long done unless overlapped)."""
        if self._staged is not None:
            self._staged.synchronize()

    def _copy_tokens_out(self, seqs: list[Sequence], greedy: torch.Tensor) -> _InFlight:
        """Start copying the greedy tokens [B] of the step just launched into a pinned buffer; where the step's
        argmax writes them into pinned memory itself (`roseinfer.host_tokens`), only mark the step's end."""
        i = self._next_buf
        self._next_buf ^= 1
        event, host = self._token_events[i], self.graphs.host_tokens
        if host is not None:
            tokens = functools.partial(host.read, self.graphs.host_rows, len(seqs))
        else:
            buf = self._token_bufs[i][: len(seqs)]
            buf.copy_(greedy, non_blocking=event is not None)
            tokens = buf.tolist
        if event is not None:
            event.record()
        return _InFlight(list(seqs), tokens, event)

    @staticmethod
    def _read_tokens(inflight: _InFlight) -> list[int]:
        if inflight.done is not None:
            inflight.done.synchronize()
        return inflight.tokens()
