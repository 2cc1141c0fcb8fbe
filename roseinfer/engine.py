"""The engine: admits requests, runs prefill and decode steps over the paged KV cache, emits tokens."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from roseinfer import tracing
from roseinfer.block_manager import KVBlockManager
from roseinfer.block_tables import BlockTables
from roseinfer.config import EngineConfig
from roseinfer.cuda_graphs import DecodeGraphs
from roseinfer.kernels import triton_available
from roseinfer.kv_context import DecodeKV, PrefillKV
from roseinfer.scheduler import Scheduler, blocks_for
from roseinfer.sequence import SamplingParams, Sequence, Status
from roseinfer.tracing import region
from roseinfer.weights import build_model


@dataclass
class _InFlight:
    """A decode step launched whose greedy tokens the host has not read yet."""

    seqs: list[Sequence]
    tokens: torch.Tensor  # [B] int64, pinned on CUDA: filled by a copy that `done` follows
    done: torch.cuda.Event | None  # None on CPU, where the copy is synchronous


DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


class Engine:
    def __init__(self, model: str, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self.device = torch.device(cfg.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device 'cuda' requested but CUDA is not available")
        if cfg.paged_attn and (self.device.type != "cuda" or not triton_available()):
            raise ValueError("paged_attn (--paged-attn) needs a CUDA device and Triton")
        if cfg.cuda_graph and self.device.type != "cuda":
            raise ValueError("cuda_graph (--cuda-graph) needs a CUDA device")
        self.model, self.model_cfg = build_model(model, self.device, DTYPES[cfg.dtype], cfg.seed)
        mc = self.model_cfg
        self.max_blocks_per_seq = blocks_for(mc.n_positions, cfg.block_size)
        # Default pool: every slot of the batch can reach the model's full length, plus one prefill batch.
        num_blocks = cfg.num_blocks or (cfg.max_batch_size + 1) * self.max_blocks_per_seq
        self.mgr = KVBlockManager(
            mc.n_layer,
            num_blocks,
            cfg.block_size,
            mc.n_head,
            mc.head_dim,
            DTYPES[cfg.dtype],
            self.device,
            prefix_cache=cfg.prefix_cache,
            batched_rollover=cfg.batched_rollover,
            pad_block=True,
        )
        self.tables = BlockTables(
            mc.n_layer,
            cfg.max_batch_size,
            self.max_blocks_per_seq,
            self.device,
            cache=cfg.block_table_cache,
            pad_block=self.mgr.pad_block,
        )
        # A decode step's inputs [3, B_MAX]: token ids, past lengths, 1 for live rows (0 for a graph bucket's
        # padding): staged on the host (pinned), one copy over.
        pin = self.device.type == "cuda"
        self.inputs_host = torch.zeros(3, cfg.max_batch_size, dtype=torch.int64, pin_memory=pin)
        self.inputs = self.inputs_host if not pin else self.inputs_host.to(self.device)
        self._input_views: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        # Host-to-device copies read the pinned buffers after the call returns; before the host writes them again
        # it waits for this event (recorded after the last copy). Only the overlapped decode can get that far
        # ahead; elsewhere it has long fired.
        self._staged = torch.cuda.Event() if pin else None
        # Overlapped decode (static path): the step launched but whose tokens are not read yet, and two pinned
        # buffers its greedy tokens are copied into (two: the next step's copy must not overwrite unread tokens).
        self._inflight: _InFlight | None = None
        self._token_bufs = [
            torch.zeros(cfg.max_batch_size, dtype=torch.int64, pin_memory=pin) for _ in range(2)
        ]
        self._token_events = [torch.cuda.Event() if pin else None for _ in range(2)]
        self._next_buf = 0
        self.scheduler = Scheduler(cfg, num_blocks)
        self.scale = 1.0 / math.sqrt(mc.head_dim)
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.steplog = tracing.step_log({"block_size": cfg.block_size, "model": model})
        self.decode_steps = 0  # decode step ranges so far (the step log's index)
        self.rollover_steps: set[int] = set()  # decode step indices in which some sequence took a new block
        # Counters over the engine's life (tests and benchmarks read them).
        self.stats = {
            "prefix_hit_blocks": 0,
            "cow": 0,
            "rollovers": 0,
            "preemptions": 0,
            "decode_ns": 0,
            "prefill_ns": 0,
            "decode_steps": 0,  # forward passes of decode (a drain of the overlapped decode runs none)
            "decode_kv_tokens": 0,  # past tokens whose K/V the decode steps read (for the HBM floor)
        }
        self._next_id = 0
        self.on_token: Callable[[Sequence, int], None] | None = None
        self.graphs: DecodeGraphs | None = None
        # Static path: the batch and bucket the device tables hold now, and their slot blocks [L, B].
        self._static_batch: list[Sequence] = []
        self._static_rows = 0
        self._static_slots = np.zeros((mc.n_layer, 0), dtype=np.int64)
        self._layer_index = np.arange(mc.n_layer)[:, None]
        if cfg.cuda_graph:
            self.use_static_decode(capture=True)

    def use_static_decode(self, capture: bool) -> None:
        """Decode through static buffers, captured in CUDA graphs per batch bucket (`--cuda-graph`); with
        capture=False the same path runs eagerly, which is how it is checked where graphs cannot run (CPU)."""
        self.graphs = DecodeGraphs(
            self.model,
            self.mgr,
            self.tables,
            self.inputs,
            self.scale,
            self.cfg.paged_attn,
            self.cfg.max_batch_size,
            capture=capture,
        )

    # -- requests ------------------------------------------------------------------------------------------------
    def add_request(
        self, prompt_ids: list[int], params: SamplingParams, arrival_ns: int | None = None
    ) -> Sequence:
        mc = self.model_cfg
        if len(prompt_ids) == 0:
            raise ValueError("prompt is empty: give at least one token")
        bad = [t for t in prompt_ids if not (0 <= int(t) < mc.vocab_size)]
        if bad:
            raise ValueError(f"token id {bad[0]} is outside the vocabulary (0..{mc.vocab_size - 1})")
        if len(prompt_ids) + params.max_new_tokens > mc.n_positions:
            raise ValueError(
                f"prompt ({len(prompt_ids)} tokens) plus max_new_tokens ({params.max_new_tokens}) exceeds the "
                f"model's {mc.n_positions} positions"
            )
        seq = Sequence(
            id=self._next_id,
            prompt_ids=[int(t) for t in prompt_ids],
            params=params,
            arrival_ns=tracing.now_ns() if arrival_ns is None else arrival_ns,
        )
        self._next_id += 1
        self.scheduler.add(seq)
        return seq

    def has_unfinished(self) -> bool:
        return self.scheduler.has_unfinished()

    # -- steps ---------------------------------------------------------------------------------------------------
    @torch.inference_mode()
    def step(self) -> list[Sequence]:
        """One scheduler step: admit and prefill what fits, then decode every running sequence once."""
        finished: list[Sequence] = []
        start_ns, prefill_ns = tracing.now_ns(), self.stats["prefill_ns"]
        with region(tracing.SCHEDULER_STEP):
            if self._inflight is not None and not self._can_continue():
                finished += (
                    self._drain()
                )  # the step in flight cannot be followed on the device: read its tokens
            else:
                batch = self.scheduler.admit(self.mgr.num_free())
                if batch:
                    finished += self._prefill(batch)
                if not self.scheduler.running:
                    return finished
                self._make_room_for_decode()
                finished += self._decode(list(self.scheduler.running))
        # Decode time: the whole step but its prefill, scheduling and emitting included. With the overlapped
        # decode the GPU works through all of it, so the decode ranges alone would leave real time out.
        self.stats["decode_ns"] += tracing.now_ns() - start_ns - (self.stats["prefill_ns"] - prefill_ns)
        return finished

    def _make_room_for_decode(self) -> None:
        """Preempt the newest sequences until every running one can take its next token."""
        while True:
            running = self.scheduler.running
            need = sum(1 for s in running if s.num_cached % self.cfg.block_size == 0)
            if need <= self.mgr.num_free() or len(running) == 1:
                return
            self._release(self.scheduler.preempt_newest())
            self.stats["preemptions"] += 1

    def _release(self, seq: Sequence) -> None:
        for layer, ids in enumerate(seq.block_ids):
            self.mgr.free(layer, ids)
        seq.block_ids = []
        seq.num_cached = 0
        seq.table_row = None
        seq.table_row_blocks = -1

    def _prefill(self, seqs: list[Sequence]) -> list[Sequence]:
        mgr, bs, n_layer = self.mgr, self.cfg.block_size, self.model_cfg.n_layer
        start_ns = tracing.now_ns()
        with region(tracing.PREFILL):
            starts: list[int] = []
            keys_of: list[list[object]] = []
            for seq in seqs:
                tokens = seq.all_ids
                keys = KVBlockManager.prefix_keys(tokens, bs) if self.cfg.prefix_cache else []
                seq.block_ids = [mgr.match_prefix(layer, keys) for layer in range(n_layer)]
                hit_tokens = len(seq.block_ids[0]) * bs
                self.stats["prefix_hit_blocks"] += len(seq.block_ids[0])
                # A full hit still recomputes the last token: its logits give the next token.
                starts.append(min(hit_tokens, len(tokens) - 1))
                for layer in range(n_layer):
                    while len(seq.block_ids[layer]) < blocks_for(len(tokens), bs):
                        seq.block_ids[layer].append(mgr.allocate(layer))
                seq.table_row = None
                seq.table_row_blocks = -1
                keys_of.append(keys)
            ids, pos, last = [], [], []
            for seq, start in zip(seqs, starts):
                tokens = seq.all_ids
                ids += tokens[start:]
                pos += range(start, len(tokens))
                last.append(len(ids) - 1)
            kv = PrefillKV(mgr, seqs, starts, self.scale)
            logits = self.model(
                torch.tensor(ids, device=self.device),
                torch.tensor(pos, device=self.device),
                kv,
                last=torch.tensor(last, device=self.device),
            )
            for seq, keys in zip(seqs, keys_of):
                seq.num_cached = seq.num_tokens
                for layer in range(n_layer):
                    for i, key in enumerate(keys):
                        mgr.register(layer, seq.block_ids[layer][i], key)
            with region(tracing.SAMPLE):
                next_ids = self._sample(logits, seqs)
        self.stats["cow"] += kv.cow // max(n_layer, 1)
        self.stats["prefill_ns"] += tracing.now_ns() - start_ns
        if self.steplog is not None:
            self.steplog.write(
                {
                    "type": "prefill",
                    "start_ns": start_ns,
                    "end_ns": tracing.now_ns(),
                    "batch_size": len(seqs),
                    "tokens": len(ids),
                    "cow": kv.cow // max(n_layer, 1),
                    "requests": [s.id for s in seqs],
                }
            )
        return self._emit(seqs, next_ids, -1)

    def _decode(self, seqs: list[Sequence]) -> list[Sequence]:
        graphs = self.graphs
        if graphs is not None and self.cfg.overlap_decode and all(s.params.temperature == 0 for s in seqs):
            return self._decode_overlapped(seqs)
        start_ns = tracing.now_ns()
        batch = len(seqs)
        with region(tracing.DECODE_STEP):
            greedy = None
            if graphs is None:
                with region(tracing.BUILD_BLOCK_TABLES):
                    width = self.tables.build(seqs)
                with region(tracing.H2D_BLOCK_TABLES):
                    self.tables.to_device(batch)
                    self._stage_inputs(seqs, batch)
                self.stats["decode_kv_tokens"] += sum(s.num_cached for s in seqs)
                with region(tracing.MODEL_FORWARD):
                    tables = self.tables.device_view(batch, width)  # [L, B, width]
                    ids, past = self.inputs[0, :batch], self.inputs[1, :batch]
                    kv = DecodeKV(
                        self.mgr, seqs, tables, past, self.scale, self.cfg.batched_kv_append, self.cfg.paged_attn
                    )  # fmt: skip
                    logits = self.model(ids, past, kv)  # [B, V]
                rollovers, cow = self.mgr.last_rollovers[0], self.mgr.last_cow[0]
            else:
                rollovers, cow, logits, greedy = self._launch_static(seqs, restage=True)
            with region(tracing.SAMPLE):
                next_ids = self._sample(logits, seqs, greedy)
        if graphs is None:
            for seq in seqs:
                seq.num_cached += 1
        index = self._log_decode_step(start_ns, seqs, rollovers, cow, launched=True)
        return self._emit(seqs, next_ids, index)

    def _decode_overlapped(self, seqs: list[Sequence]) -> list[Sequence]:
        """Launch this step, then read the tokens of the step launched in the previous call (if any) and emit
        them. The GPU runs step k while the host emits step k-1's tokens and prepares step k+1; each call (a
        `roseinfer.decode_step` range) emits the tokens of the step launched in the call before it.

        `step()` only gets here with a step in flight when the batch is the same and no sequence of it finishes
        by length with that step (`_can_continue`); a sequence that meets EOS does finish when its token is read,
        and the token the following step already computed for it is dropped."""
        start_ns = tracing.now_ns()
        previous = self._inflight
        with region(tracing.DECODE_STEP):
            rollovers, cow, _, greedy = self._launch_static(seqs, restage=previous is None)
            self._inflight = self._copy_tokens_out(seqs, greedy)
            next_ids = None
            if previous is not None:
                with region(tracing.SAMPLE):  # waits for the previous step on the GPU
                    next_ids = self._read_tokens(previous)
        index = self._log_decode_step(start_ns, seqs, rollovers, cow, launched=True)
        if previous is None:
            return []
        finished = self._emit(previous.seqs, next_ids, index)
        if finished and all(s.status is not Status.RUNNING for s in seqs):
            self._inflight = (
                None  # every sequence of the step just launched is done: its tokens are not needed
            )
        return finished

    def _can_continue(self) -> bool:
        """Can the next step follow the one in flight on the device (same batch, greedy tokens read there)?"""
        running, inflight = self.scheduler.running, self._inflight
        if running != inflight.seqs:  # a sequence finished (EOS) when the previous tokens were read
            return False
        if self.scheduler.waiting and len(running) < self.cfg.max_batch_size:
            return False  # a request may be admitted: prefill first
        if any(len(s.output_ids) + 1 >= s.params.max_new_tokens for s in running):
            return False  # finishes by length with the step in flight
        need = sum(1 for s in running if s.num_cached % self.cfg.block_size == 0)
        return need <= self.mgr.num_free()  # no preemption needed

    def _drain(self) -> list[Sequence]:
        """A decode step range that launches nothing: read the step in flight and emit its tokens."""
        start_ns = tracing.now_ns()
        inflight, self._inflight = self._inflight, None
        with region(tracing.DECODE_STEP):
            with region(tracing.SAMPLE):
                next_ids = self._read_tokens(inflight)
        index = self._log_decode_step(start_ns, inflight.seqs, 0, 0, launched=False)
        return self._emit(inflight.seqs, next_ids, index)

    def _launch_static(
        self, seqs: list[Sequence], restage: bool
    ) -> tuple[int, int, torch.Tensor, torch.Tensor]:
        """Static path: reserve every sequence's slot, stage what changed, replay the bucket's graph. restage:
        copy token ids and past lengths from the host (False: the previous step left them on the device).
        Returns (rollovers, copy-on-writes, logits [B, V], greedy tokens [B])."""
        graphs = self.graphs
        batch = len(seqs)
        rows = graphs.bucket_for(batch)  # padded to the graph's batch bucket, tables at full width
        with region(tracing.BUILD_BLOCK_TABLES):
            rollovers, cow, changed = self._reserve_decode_slots(seqs, rows)
        with region(tracing.H2D_BLOCK_TABLES):
            if changed:
                self.tables.to_device(rows)
            if restage:
                self._stage_inputs(seqs, rows)
            if self._staged is not None and (changed or restage):
                self._staged.record()
        self.stats["decode_kv_tokens"] += sum(s.num_cached for s in seqs)
        with region(tracing.MODEL_FORWARD):
            logits, greedy = graphs.run(batch)
        for seq in seqs:
            seq.num_cached += 1  # the new token's K/V is written (or will be, by the step just launched)
        return rollovers, cow, logits, greedy

    def _copy_tokens_out(self, seqs: list[Sequence], greedy: torch.Tensor) -> _InFlight:
        """Start copying the greedy tokens [B] of the step just launched into a pinned buffer."""
        i = self._next_buf
        self._next_buf ^= 1
        buf, event = self._token_bufs[i][: len(seqs)], self._token_events[i]
        buf.copy_(greedy, non_blocking=event is not None)
        if event is not None:
            event.record()
        return _InFlight(list(seqs), buf, event)

    @staticmethod
    def _read_tokens(inflight: _InFlight) -> list[int]:
        if inflight.done is not None:
            inflight.done.synchronize()
        return inflight.tokens.tolist()

    def _log_decode_step(
        self, start_ns: int, seqs: list[Sequence], rollovers: int, cow: int, launched: bool
    ) -> int:
        """Count and log one decode step range; returns its index."""
        end_ns = tracing.now_ns()
        self.stats["rollovers"] += rollovers
        self.stats["decode_steps"] += int(launched)
        self.stats["cow"] += cow
        if cow:  # a copy-on-write swapped a block id without changing the count
            for seq in seqs:
                seq.table_row_blocks = -1
        index = self.decode_steps
        self.decode_steps += 1
        if rollovers:
            self.rollover_steps.add(index)
        if self.steplog is not None:
            self.steplog.step(start_ns, end_ns, len(seqs), rollovers, cow, [s.id for s in seqs])
        tracing.profiler_step()
        return index

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

    def _reserve_decode_slots(self, seqs: list[Sequence], rows: int) -> tuple[int, int, bool]:
        """Static path: give every sequence the KV slot of its new token before the step, so the step itself is
        device work only. Builds the host block tables (padded to `rows`) when they changed; returns
        (rollovers, copy-on-writes, tables changed).

        In most steps nothing changed: the same sequences in the same rows, none starting a block. Then the
        tables on the device are still right and only the fill counts move (the slots are read from the tables
        on the device), which keeps this off the host's critical path (186 us -> see docs/BENCHMARKS.md)."""
        mgr, bs, n_layer = self.mgr, self.cfg.block_size, self.model_cfg.n_layer
        starting = [
            seq for seq in seqs if seq.num_cached == len(seq.block_ids[0]) * bs
        ]  # new token starts a block
        rollovers = len(starting)
        past = np.fromiter((s.num_cached for s in seqs), dtype=np.int64, count=len(seqs))
        same = not starting and rows == self._static_rows and seqs == self._static_batch
        cow = 0
        if not same:
            self._host_buffers_free()
            if starting:
                for layer in range(n_layer):
                    for seq, block in zip(starting, mgr.allocate_many(layer, rollovers)):
                        seq.block_ids[layer].append(block)
            self.tables.build(seqs, pad_to=rows)
            slot_blocks = self._slot_blocks(seqs, past)
            shared = np.nonzero(
                mgr.refcount[self._layer_index, slot_blocks] > 1
            )  # shared, partly filled block
            cow = len(set(shared[1].tolist()))
            if cow:
                for layer, row in zip(*shared):
                    mgr.copy_on_write(int(layer), seqs[row].block_ids[layer])
                    seqs[row].table_row_blocks = -1
                self.tables.build(seqs, pad_to=rows)
                slot_blocks = self._slot_blocks(seqs, past)
            self._static_batch, self._static_rows, self._static_slots = list(seqs), rows, slot_blocks
        mgr.fill[self._layer_index, self._static_slots] = (past % bs + 1)[None, :]
        return rollovers, cow, not same

    def _host_buffers_free(self) -> None:
        """Wait until the last host-to-device copy has read the pinned buffers (long done unless overlapped)."""
        if self._staged is not None:
            self._staged.synchronize()

    def _slot_blocks(self, seqs: list[Sequence], past: np.ndarray) -> np.ndarray:
        """[L, B] block that receives each sequence's new token, read from the host tables."""
        return self.tables.host_np[np.arange(len(seqs)), :, past // self.cfg.block_size].T

    def _sample(
        self, logits: torch.Tensor, seqs: list[Sequence], greedy: torch.Tensor | None = None
    ) -> list[int]:
        # logits: [B, V]; greedy: their argmax [B] where the step computed it already
        temps = [s.params.temperature for s in seqs]
        if greedy is None:
            greedy = torch.argmax(logits, dim=-1)
        if all(t == 0 for t in temps):
            return greedy.tolist()
        t = torch.tensor([max(x, 1e-6) for x in temps], device=logits.device, dtype=torch.float32)
        probs = torch.softmax(logits.float() / t[:, None], dim=-1)
        sampled = torch.multinomial(probs, 1, generator=self.generator).squeeze(1)
        is_greedy = torch.tensor([x == 0 for x in temps], device=logits.device)
        return torch.where(is_greedy, greedy, sampled).tolist()

    def _emit(self, seqs: list[Sequence], next_ids: list[int], step_index: int) -> list[Sequence]:
        now = tracing.now_ns()
        eos = self.model_cfg.eos_token_id
        finished = []
        for seq, tok in zip(seqs, next_ids):
            if seq.status is not Status.RUNNING:
                continue  # finished (EOS) while the step that computed this token was in flight
            seq.output_ids.append(tok)
            seq.token_ns.append(now)
            seq.token_step.append(step_index)
            if self.on_token is not None:
                self.on_token(seq, tok)
            reason = None
            if tok == eos and not seq.params.ignore_eos:
                reason = "stop"
            elif len(seq.output_ids) >= seq.params.max_new_tokens:
                reason = "length"
            if reason is not None:
                self.scheduler.finish(seq, reason)
                self._release(seq)
                finished.append(seq)
                self._log_request(seq)
        return finished

    def _log_request(self, seq: Sequence) -> None:
        if self.steplog is None:
            return
        self.steplog.write(
            {
                "type": "request",
                "id": seq.id,
                "arrival_ns": seq.arrival_ns,
                "prompt_tokens": len(seq.prompt_ids),
                "output_tokens": len(seq.output_ids),
                "token_ns": seq.token_ns,
                "token_step": seq.token_step,
                "preemptions": seq.preemptions,
            }
        )
