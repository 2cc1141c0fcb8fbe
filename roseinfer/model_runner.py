"""The model runner: the device side of a step. It owns the model, the KV cache tensors, the block tables, the staged
inputs, the CUDA graphs and the overlapped decode, and turns a batch of sequences into their next token ids.

Here: what the runner sets up, the prefill, the sampling and the measurement hooks. Its three decode paths behind
`decode(seqs)` (eager, static, overlapped) are its base class's, `roseinfer.decode_paths.DecodePaths`.

The runner opens the regions inside a step (build/h2d block tables, model forward, sample); the engine holds
`roseinfer.prefill` and `roseinfer.decode_step` around its calls.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from roseinfer import cpu_threads, distributed, prefill_shapes, tracing
from roseinfer.block_manager import BlockManager, blocks_for
from roseinfer.block_tables import BlockTables
from roseinfer.config import EngineConfig, resolve_model_config
from roseinfer.cuda_graphs import DecodeGraphs
from roseinfer.decode_paths import DecodePaths, _InFlight
from roseinfer.decode_slots import DecodeSlots
from roseinfer.graph_kernels import GraphKernels
from roseinfer.kernels import triton_available
from roseinfer.kv_cache import KVCache
from roseinfer.kv_context import PrefillKV, prefill_attention_backends
from roseinfer.sampler import sample
from roseinfer.sequence import Sequence
from roseinfer.tracing import region
from roseinfer.weights import build_model

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


@dataclass
class PrefillOutput:
    token_ids: list[int]  # the first new token of each sequence
    tokens: int  # prompt tokens computed (prefix-cache hits but the last token left out)
    cow: int  # copy-on-writes (blocks copied, in every layer)
    prefix_hit_blocks: int


class ModelRunner(DecodePaths):
    def __init__(self, model: str, cfg: EngineConfig) -> None:
        self.cfg = cfg
        self.tp = self._join_ranks(model, cfg)
        self.device = distributed.rank_device(cfg.device, self.tp)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise ValueError("device 'cuda' requested but CUDA is not available")
        if cfg.paged_attn and (self.device.type != "cuda" or not triton_available()):
            raise ValueError("paged_attn (--paged-attn) needs a CUDA device and Triton")
        if cfg.cuda_graph and self.device.type != "cuda":
            raise ValueError("cuda_graph (--cuda-graph) needs a CUDA device")
        self.model, self.model_cfg = build_model(model, self.device, DTYPES[cfg.dtype], cfg.seed, self.tp)
        mc = self.model_cfg
        heads = self.model.h[0].n_head  # this rank's (all of them on one device)
        if self.tp is not None and cfg.tp_allreduce == "symm_mem":
            # Room for a decode step's [B_MAX, C]; a prefill's larger messages take NCCL.
            self.tp.use_symm_mem(cfg.max_batch_size * mc.n_embd, DTYPES[cfg.dtype], self.device)
        if self.tp is not None and cfg.tp_allreduce == "fused":
            self.tp.use_fused(mc.n_layer, mc.n_embd, self.device, cfg.tp_timeout_s)
        # On the CPU: how many intra-op threads, and why (None on other devices, whose kernels torch does not split).
        self.cpu_threads = (
            cpu_threads.apply(mc.n_embd, cfg.cpu_threads, cfg.tensor_parallel_size)
            if self.device.type == "cpu"
            else None
        )
        self.max_blocks_per_seq = blocks_for(mc.n_positions, cfg.block_size)
        # Default pool: every slot of the batch can reach the model's full length, plus one prefill batch.
        num_blocks = cfg.num_blocks or (cfg.max_batch_size + 1) * self.max_blocks_per_seq
        # This rank's keys and values (one block beyond the pool: the pad block), and the block accounting every
        # rank keeps alike; a copy-on-write the accounting decides is copied by the cache.
        self.kv_cache = KVCache(
            mc.n_layer, num_blocks + 1, cfg.block_size, heads, mc.head_dim, DTYPES[cfg.dtype], self.device
        )
        self.mgr = BlockManager(
            mc.n_layer, num_blocks, cfg.block_size, self.kv_cache.copy_block,
            prefix_cache=cfg.prefix_cache, batched_rollover=cfg.batched_rollover, pad_block=True,
        )  # fmt: skip
        self.tables = BlockTables(
            mc.n_layer, cfg.max_batch_size, self.max_blocks_per_seq, self.device,
            cache=cfg.block_table_cache, pad_block=self.mgr.pad_block,
        )  # fmt: skip
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
        # Overlapped decode: the step launched but whose tokens are not read yet, and two pinned buffers its
        # greedy tokens are copied into (two: the next step's copy must not overwrite unread tokens) where its
        # argmax does not write them into pinned memory itself (`roseinfer.host_tokens`: the captured step's rule).
        self._inflight: _InFlight | None = None
        self._greedy_batch: list[Sequence] = []  # the last batch `_all_greedy` counted, and its answer
        self._all_greedy_batch = True
        self._token_bufs = [
            torch.zeros(cfg.max_batch_size, dtype=torch.int64, pin_memory=pin) for _ in range(2)
        ]
        self._token_events = [torch.cuda.Event() if pin else None for _ in range(2)]
        self._next_buf = 0
        self.scale = 1.0 / math.sqrt(mc.head_dim)
        self.generator = torch.Generator(device=self.device).manual_seed(cfg.seed)
        self.graphs: DecodeGraphs | None = None
        # Static path: each new token's KV slot reserved on the host before the step.
        self.slots = DecodeSlots(self.mgr, self.tables, self._host_buffers_free)
        if cfg.cuda_graph:
            self.use_static_decode(capture=True)
        # A prefill's packed rows, padded to a few sizes on CUDA, each GEMM shape met here once: cuBLAS chose an
        # algorithm on the host for every new row count, 13 ms of a 90-token prefill (prefill_shapes.py).
        cuda = self.device.type == "cuda"
        self.prefill_rows = prefill_shapes.padded_rows if cuda else (lambda tokens: tokens)
        if cuda:
            prefill_shapes.warm_gemms(
                self.model, cfg.prefill_max_batch_size * mc.n_positions, cfg.prefill_max_batch_size
            )
            self._warm_prefill()

    @staticmethod
    def _join_ranks(model: str, cfg: EngineConfig) -> distributed.TPGroup | None:
        """With tensor_parallel_size > 1: check the model splits, then join the ranks' process group."""
        if cfg.tensor_parallel_size == 1:
            return None
        from roseinfer.sharding import check_shardable

        check_shardable(resolve_model_config(model).n_head, cfg.tensor_parallel_size, model)
        return distributed.init(cfg.tensor_parallel_size, torch.device(cfg.device).type, cfg.tp_timeout_s)

    def use_static_decode(self, capture: bool, kernels: GraphKernels | None = None) -> None:
        """Decode through static buffers, captured in CUDA graphs per batch bucket (`--cuda-graph`); with
        capture=False the same path runs eagerly, which is how it is checked where graphs cannot run (CPU).
        kernels: the captured step's kernel choices (default: the engine's, every one on; a measurement hook for
        scripts/bench_*.py and the tests that compare a kernel with the design before it)."""
        self.graphs = DecodeGraphs(
            self.model, self.kv_cache, self.tables, self.inputs, self.scale, self.cfg.paged_attn,
            self.cfg.max_batch_size, capture=capture,
            kernels=kernels or GraphKernels.of(self.cfg),
        )  # fmt: skip

    @property
    def in_flight(self) -> list[Sequence] | None:
        """The batch of the decode step launched whose tokens are not read yet (overlapped decode), if any."""
        return None if self._inflight is None else self._inflight.seqs

    # -- prefill -------------------------------------------------------------------------------------------------
    def prefill(self, seqs: list[Sequence]) -> PrefillOutput:
        """Blocks for every prompt (cached prefixes shared), one packed forward over the tokens not cached, and
        each sequence's first new token."""
        mgr, bs = self.mgr, self.cfg.block_size
        starts: list[int] = []
        keys_of: list[list[object]] = []
        hits = 0
        for seq in seqs:
            keys, hit_blocks = mgr.allocate_prompt(seq)
            hits += hit_blocks
            # A full hit still recomputes the last token: its logits give the next token.
            starts.append(min(hit_blocks * bs, seq.num_tokens - 1))
            keys_of.append(keys)
        logits, kv, tokens = self._forward_prompts(seqs, starts)
        for seq, keys in zip(seqs, keys_of):
            seq.num_cached = seq.num_tokens
            mgr.register_prompt(seq, keys)
        with region(tracing.SAMPLE):
            token_ids = self._sample(logits, seqs)
        return PrefillOutput(token_ids, tokens, kv.cow, hits)

    def _forward_prompts(
        self, seqs: list[Sequence], starts: list[int]
    ) -> tuple[torch.Tensor, PrefillKV, int]:
        """One packed forward over each sequence's tokens from its start, the rows padded (prefill_shapes.py): the
        logits of each sequence's last token [S, V], the KV context it wrote through, and the real rows T."""
        ids, pos, last = [], [], []
        for seq, start in zip(seqs, starts):
            tokens = seq.all_ids
            ids += tokens[start:]
            pos += range(start, len(tokens))
            last.append(len(ids) - 1)
        kv = PrefillKV(self.mgr, self.kv_cache, seqs, starts, self.scale)
        pad = self.prefill_rows(len(ids)) - len(ids)  # rows no real token reads
        with prefill_attention_backends(self.device):
            logits = self.model(
                torch.tensor(ids + [0] * pad, device=self.device),  # [T_pad] packed, the real tokens first
                torch.tensor(pos + [0] * pad, device=self.device),
                kv,
                last=torch.tensor(last, device=self.device),
            )  # [S, V]
        return logits, kv, len(ids)

    def _warm_prefill(self) -> None:
        """One prefill through every path, into the pad block, so that CUDA loads its kernels now and not at a
        server's first requests (prefill_shapes.warm_seqs); nothing in the accounting changes."""
        seqs, starts = prefill_shapes.warm_seqs(
            self.mgr.pad_block, self.cfg.block_size, self.model_cfg.n_positions
        )
        fill = self.mgr.fill.copy()
        logits, _, _ = self._forward_prompts(seqs, starts)
        self._sample(logits, seqs)
        self.mgr.fill[:] = fill  # the pad block's fill count, as it was

    def _sample(
        self, logits: torch.Tensor, seqs: list[Sequence], greedy: torch.Tensor | None = None
    ) -> list[int]:
        temperatures = [s.params.temperature for s in seqs]
        if all(s.params.top_p == 1 and s.params.seed is None for s in seqs):
            return sample(logits, temperatures, self.generator, greedy)
        for s in seqs:
            if s.params.seed is not None and s.generator is None:
                s.generator = torch.Generator(device=logits.device).manual_seed(s.params.seed)
        top_ps, generators = [s.params.top_p for s in seqs], [s.generator for s in seqs]
        return sample(logits, temperatures, self.generator, greedy, top_ps, generators)

    # -- measurement hooks (scripts/bench_*.py) ------------------------------------------------------------------
    def time_parts(self, into: dict[str, list[int]]) -> None:
        """Time each part of a decode step on the host into `into` (label -> ns per call); call it after
        `use_static_decode`. Wraps this runner's own methods; nothing is timed unless this is called."""
        tracing.time_calls(
            self,
            {
                "_reserve_decode_slots": "runner.reserve_decode_slots",
                "_stage_inputs": "runner.stage_inputs",
                "_sample": "runner.sample",
                "_read_tokens": "runner.read_tokens",
            },
            into,
        )
        tracing.time_calls(self.tables, {"to_device": "tables.to_device"}, into)
        if self.graphs is not None:
            tracing.time_calls(self.graphs, {"run": "graphs.run"}, into)

    def freeze_static_inputs(
        self, rows: int, past: int | None = None, tables: torch.Tensor | None = None
    ) -> None:
        """Make replays of the first `rows` rows repeat one step: live flags 0, so the past lengths stay. With
        `past`, every row gets token id 1 at that past length; with `tables` [rows, L, M], those block tables."""
        if tables is not None:
            self.tables.host[:rows] = tables
            self.tables.to_device(rows)
        if past is not None:
            self.inputs_host[0, :rows] = 1
            self.inputs_host[1, :rows] = past
            self.inputs_host[2, :rows] = 0
            self.inputs[:, :rows].copy_(self.inputs_host[:, :rows])
        else:
            self.inputs[2, :rows].zero_()

    def reset_token_ids(self, rows: int) -> None:
        """Token id 1 in the first `rows` rows again (replays write their greedy tokens there)."""
        self.inputs[0, :rows] = 1
