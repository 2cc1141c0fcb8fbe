"""CUDA graphs for the decode step: one graph per batch-size bucket, replayed with its inputs in static buffers.

Eagerly, a GPT-2 small decode step is ~150 small kernels and Python's launch cost per kernel is the step (see
docs/BENCHMARKS.md). A graph replays them all from one launch. It needs fixed shapes, fixed addresses and no
host work inside, so:
- a batch runs in the smallest bucket that holds it; the rows beyond the batch are padding (token 0, no past
  tokens, and a block-table row pointing every layer at the block manager's pad block, which their appends write);
- the inputs live in static device buffers written before each replay: token ids and past lengths
  and live flags (`inputs` [3, B_MAX]) and the block tables [B_MAX, L, M] (`roseinfer.block_tables`), always at
  full width M;
- each new token's KV slot is reserved on the host before the step (`ModelRunner`, through the block manager),
  so inside the graph it is read from the block table on the device (`StaticDecodeKV`).
The logits of a bucket are one static [bucket, V] tensor that the next replay overwrites, beside the greedy
tokens [bucket]. A step ends by leaving the next step's inputs on the device: its greedy tokens as the next
token ids and every live row's past length plus one (`inputs[2]` is 1 for the batch's rows, 0 for padding). A
following step with the same batch and greedy sampling then needs nothing from the host, which is what lets the
engine launch it before reading this step's tokens (the overlapped decode, `roseinfer.decode_paths`). Otherwise the host stages
all three rows again.

Inside the graph, the linears of small buckets run as the small-batch GEMV kernel or, in buckets 16 and 32, the
skinny GEMM, and in buckets 48 to 512 as a CUTLASS GEMM that loads its weights before its PDL wait (in step parts
of 256 rows and more on a shallow pipeline that shares SMs; buckets 272, 288, 464 and 480 on cuBLAS, measured
faster there), attn_proj and mlp_proj there split along K into parts that the add + LayerNorm after them sums
(`roseinfer.linears`, `roseinfer.cuda_ext.cutlass_gemm`; which kernel where:
`roseinfer.graph_kernels.GraphKernels`), residual adds and LayerNorms run as one Triton kernel each (`roseinfer.model.residual_layer_norm`),
the greedy tokens come from a split Triton argmax (`roseinfer.kernels.argmax`; at one row folded into the lm_head
GEMV, `LmHeadArgmax`), and the KV append uses Triton at
every batch size (done by the paged-attention kernel under `--paged-attn`): in a graph a launch costs nothing,
which is what the eager path's thresholds are about. In buckets of 208 to 256 and of 512 rows (models up to 768
wide) the step runs as two halves of the batch on two streams, two branches of the graph (`roseinfer.two_halves`), whose kernels
overlap: nsys gives each branch's replayed kernels a stream id of its own, so roseprof counts each stream's time per
region and says the step's GPU busy time beside it (docs/BENCHMARKS.md, session 49).

Regions at capture time: a replay is one launch, so the regions around it (`roseinfer.model.forward` in the
runner) cannot say where its GPU time goes. Each bucket is captured inside `roseinfer.model.forward`, with the
model's part regions open around their kernels (`roseinfer.model`; `roseinfer.argmax` here), on the thread that
captures: a profiler that records the graph's nodes (nsys `--cuda-graph-trace=node`) then puts every replayed
kernel in the part that made it, and a step's kernel time adds up over the parts. Replays open none of them.

With tensor parallelism the all-reduces of each layer are captured with the rest (NCCL supports stream capture;
`roseinfer.layer.allreduce` is open around them), so a replay is still one launch per rank.

Without `capture` the same static path runs eagerly: that is how it is checked on CPU (with torch ops there).
"""

from __future__ import annotations

import bisect
import contextlib

import numpy as np
import torch

from roseinfer import distributed, exit_hooks
from roseinfer.block_tables import BlockTables
from roseinfer.cuda_ext import cutlass_gemm, fused_attn, fused_mlp
from roseinfer.cuda_ext.fused_attn import AttnScratch
from roseinfer.cuda_ext.fused_mlp import MlpScratch
from roseinfer.cuda_ext.recorder import StampedKernel, StampRecorder
from roseinfer.cuda_ext.stamps import StampLog, stamps_path
from roseinfer.graph_kernels import CUTLASS_ABOVE, GraphKernels
from roseinfer.host_tokens import HostTokens
from roseinfer.kernels import triton_available
from roseinfer.kernels.argmax import LmHeadArgmax
from roseinfer.kernels.gemv import ALLREDUCE_KERNEL
from roseinfer.kernels.pdl import pdl_scope
from roseinfer.kernels.skinny_gemm import SkinnyScratch
from roseinfer.kv_cache import KVCache
from roseinfer.kv_context import StaticDecodeKV
from roseinfer.linears import small_batch_gemv
from roseinfer.names import ALLREDUCE_KERNEL_REGION_NAMES
from roseinfer.tracing import ARGMAX, MODEL_FORWARD, STATE, region
from roseinfer.two_halves import TwoHalves


def batch_buckets(max_batch: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 16 below max_batch, then max_batch itself."""
    return sorted({b for b in (1, 2, 4, 8) if b < max_batch} | set(range(16, max_batch, 16)) | {max_batch})


def cutlass_gemm_runs(model: torch.nn.Module, cache: KVCache) -> bool:
    """Whether the CUTLASS GEMM can run this model's step: float16 on a GPU where it is built (the first call may
    build it: a minute or two, said on stderr). Where a float16 GPU step cannot, stderr says why once a process
    (its buckets run about 10% slower on cuBLAS: docs/BENCHMARKS.md, session 44)."""
    if not (cache.is_cuda and next(model.parameters()).dtype == torch.float16):
        return False
    if cutlass_gemm.module() is not None:
        return True
    cutlass_gemm.say_not_built()
    return False


class DecodeGraphs:
    def __init__(
        self,
        model: torch.nn.Module,
        cache: KVCache,
        tables: BlockTables,
        inputs: torch.Tensor,  # [3, B_MAX] on the device: token ids, past lengths, 1 for live rows (0: padding)
        scale: float,
        paged_attn: bool,
        max_batch: int,
        capture: bool,
        kernels: GraphKernels = GraphKernels(),
    ) -> None:
        self.model = model
        self.cache = cache
        self.tables = tables
        self.inputs = inputs
        self.scale = scale
        self.paged_attn = paged_attn
        self.buckets = batch_buckets(max_batch)
        self.capture = capture
        # (asked only where the GEMM is wanted: where it cannot run, cutlass_gemm_runs says why on stderr)
        cutlass_runs = not kernels.cutlass_gemm_max_batch or cutlass_gemm_runs(model, cache)
        kernels = kernels.for_step(cutlass_runs, tensor_parallel=model.h[0].tp is not None)
        self.kernels = kernels
        # Triton add+LayerNorm on CUDA (free to launch inside a graph; eagerly too, so that the uncaptured path
        # computes exactly what a replay does)
        self.fused = kernels.fused_add_layernorm and cache.is_cuda and triton_available()
        # The skinny GEMM's split-K buffers, this step's own: another engine's step may run on another stream
        self.skinny_scratch = SkinnyScratch()
        # The one-row CUDA kernels' output buffers, one per layer (`AttnScratch`, `MlpScratch`), where they may run;
        # with the regions on and a stamps file asked for (a roseprof capture), their stamps too, written after
        # every batch-1 step
        self.attn_scratch = self.mlp_scratch = self.stamp_recorder = None
        if cache.is_cuda and model.cfg.n_layer >= 2:
            stamps = bool(STATE.nvtx or STATE.record_function) and stamps_path() is not None
            device, n = cache.k_caches[0].device, model.cfg.n_layer
            stamped = []
            if kernels.cuda_attn:
                self.attn_scratch = AttnScratch(n, device, stamps=stamps)
                regions = tuple(region for _, region in fused_attn.PHASES)
                stamped.append(StampedKernel(self.attn_scratch, fused_attn.KERNEL, regions))
            if kernels.cuda_mlp:
                self.mlp_scratch = MlpScratch(n, device, stamps=stamps)
                regions = tuple(region for _, region in fused_mlp.PHASES)
                stamped.append(StampedKernel(self.mlp_scratch, fused_mlp.KERNEL, regions))
            tp = model.h[0].tp
            if stamps and tp is not None and tp.fused is not None:  # the fused all-reduce's readers
                readers = tp.fused.record_readers(model.fused_reader_columns())
                regions = ALLREDUCE_KERNEL_REGION_NAMES
                stamped.append(StampedKernel(readers, ALLREDUCE_KERNEL, regions, readers.launch_bounds))
            if stamps and stamped:
                self.stamp_recorder = StampRecorder(stamped, StampLog(stamps_path()))
                exit_hooks.register(self.stamp_recorder.close)
        # The two halves on two streams of the buckets of `GraphKernels.halves_in` (one device only: with tensor
        # parallelism two streams' all-reduces could reach the ranks in different orders)
        self.halves = None
        if model.h[0].tp is None and any(kernels.halves_in(b, model.cfg.n_embd) for b in self.buckets):
            self.halves = TwoHalves(cache.k_caches[0].device)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        # bucket -> (logits [bucket, V], greedy tokens [bucket]), written by that bucket's graph
        self.outputs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        # The argmax writes the greedy tokens into pinned host memory too (`roseinfer.host_tokens`); `host_rows`:
        # the row of it each row of the last step run wrote (`HostTokens.launched`)
        self.host_tokens = None
        if kernels.argmax_to_host and kernels.argmax_advances and self.fused:
            self.host_tokens = HostTokens(inputs.shape[1], cache.k_caches[0].device)
        self.host_rows: np.ndarray | None = None
        # At one row the lm_head GEMV folds the greedy token into words the step's argmax then reads
        self.lm_head_argmax = None
        if kernels.lm_head_argmax and kernels.lm_head_gemv and kernels.argmax_advances and self.fused:
            self.lm_head_argmax = LmHeadArgmax(cache.k_caches[0].device)
        if capture:
            self._capture()

    def bucket_for(self, batch: int) -> int:
        return self.buckets[bisect.bisect_left(self.buckets, batch)]

    def forward(self, bucket: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The step a graph holds: logits [bucket, V] and greedy tokens [bucket] from the static inputs, which it
        then advances to the next step's (see the module's docstring). In the buckets of `GraphKernels.halves_in`
        as two halves of the batch on two streams (`roseinfer.two_halves`). With `host_tokens` it flips the
        device's parities but not the host's: the engine runs a step through `run` (or `replay`), which does both."""
        halves = self.halves is not None and self.kernels.halves_in(bucket, self.model.cfg.n_embd)
        rows = bucket // 2 if halves else bucket  # a part's kernels are those of a bucket of its rows
        with self._kernel_choices(rows):
            if not halves:
                *_, (logits, greedy) = self._part(0, bucket)
                return logits, greedy
            head = self.model.head_weight  # [V_PAD, C]
            logits_out = torch.empty(
                bucket, head.shape[0], dtype=head.dtype, device=head.device
            )  # [bucket, V_PAD]
            return self.halves.run(bucket, self._part, logits_out)

    @contextlib.contextmanager
    def _kernel_choices(self, rows: int):
        """The kernel choices (`GraphKernels`) of a step part of `rows` rows, in force around its launches."""
        k, width = self.kernels, self.model.cfg.n_embd
        with (
            small_batch_gemv(
                k.gemv_max_batch,
                k.norm_gemv,
                k.embedding_gather,
                k.lm_head_gemv,
                k.skinny_gemm_max_batch,
                self.skinny_scratch,
                self.mlp_scratch,
                self.attn_scratch,
                (CUTLASS_ABOVE, k.cutlass_gemm_max_batch) if k.cutlass_in(rows, width) else (0, 0),
                k.cutlass_split_k,
                k.cutlass_min_splits if rows <= k.cutlass_min_splits_max_batch else 1,
                0 < k.cutlass_shallow_from <= rows,
                self.lm_head_argmax,
            ),
            pdl_scope(
                k.pdl_in(rows, width),
                k.pdl_attention or (k.cutlass_pdl_attention and k.cutlass_in(rows, width)),
                k.attention_release_in(rows),
                k.pdl_attention_prefetch,
                k.pdl_early_release,
                k.layer_norm_early_in(rows, width),
            ),
        ):
            yield

    def _part(self, lo: int, hi: int, logits_out: torch.Tensor | None = None):
        """The step of rows [lo, hi) one block at a time: yields None after each block's launches, then (logits
        [rows, V], greedy tokens [rows]). logits_out: [rows, V_PAD] for its lm_head to write."""
        ids, past, live = self.inputs[0, lo:hi], self.inputs[1, lo:hi], self.inputs[2, lo:hi]
        tables = self.tables.dev[lo:hi].permute(1, 0, 2)  # [L, rows, M]
        k = self.kernels
        kv = StaticDecodeKV(
            self.cache, tables, past, self.scale, self.paged_attn, in_graph=self.capture,
            min_batch=k.append_min_batch, append_in_attention=k.append_in_attention,
            split_attention=k.split_attention, split_serial_blocks=k.split_serial_blocks,
            attention_chunks=k.attention_chunks, cuda_attention=k.cuda_paged_attention,
            cuda_attention_stages=k.cuda_attention_stages,
        )  # fmt: skip
        fold = self.lm_head_argmax
        if fold is not None:  # set again where this part's lm_head folds its argmax
            if fold.folded:  # a part stopped between its GEMV and the words' reader: their values are stale
                fold.words.fill_(torch.iinfo(torch.int64).min)
            fold.folded = False
        steps = self.model.steps(
            ids, past, kv, fused=self.fused, gelu_epilogue=k.gelu_epilogue, logits_out=logits_out
        )
        for logits in steps:  # the last: the logits [rows, V]
            if logits is None:
                yield None
        with region(ARGMAX):
            greedy = self._greedy(logits, ids, past, live, lo, hi)  # [rows]
        yield logits, greedy

    def _greedy(
        self,
        logits: torch.Tensor,
        ids: torch.Tensor,
        past: torch.Tensor,
        live: torch.Tensor,
        lo: int,
        hi: int,
    ) -> torch.Tensor:
        """The greedy tokens [rows] of logits [rows, V] (the step's rows [lo, hi)), left as the next step's ids
        with the live rows' past lengths grown by one, and with `host_tokens` in pinned host memory too."""
        if not self.fused:
            greedy = torch.argmax(logits, dim=-1)  # [rows]
            ids.copy_(greedy)
            past.add_(live)
            return greedy
        from roseinfer.kernels.argmax import argmax_triton, argmax_words

        rows, k = logits.shape[0], self.kernels
        # dependent launches after the lm_head GEMV (one row), which is one itself under PDL
        after_gemv = k.pdl_in(rows, self.model.cfg.n_embd) and k.lm_head_gemv and rows == 1
        if k.argmax_advances:  # its second kernel leaves the next step's ids and past lengths too
            to_host = None if self.host_tokens is None else self.host_tokens.rows(lo, hi)
            fold = self.lm_head_argmax
            if fold is not None and fold.folded:  # the lm_head GEMV found the token already
                assert rows == 1  # one step part's words (a one-row GEMV: `lm_head_gemv_applies`)
                fold.folded = False
                return argmax_words(fold.words, advance=(ids, past, live), pdl=after_gemv, to_host=to_host)
            return argmax_triton(
                logits,
                advance=(ids, past, live),
                pdl=after_gemv,
                num_warps=k.argmax_warps,
                to_host=to_host,
            )
        greedy = argmax_triton(logits, pdl=after_gemv, num_warps=k.argmax_warps)
        ids.copy_(greedy)
        past.add_(live)
        return greedy

    @torch.inference_mode()
    def _capture(self) -> None:
        # Inputs are zeros and tables all padding here, so warm-up and capture only write the pad block.
        pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream()
        # With tensor parallelism NCCL's watchdog thread polls the events of earlier collectives (the warm-up's).
        # In the default ("global") mode any CUDA call another thread makes during a capture invalidates it;
        # "thread_local" forbids unsafe calls on this thread only. One device keeps the default.
        mode = "thread_local" if self.model.h[0].tp is not None else "global"
        for bucket in reversed(self.buckets):  # largest first: the smaller ones reuse its memory
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up: Triton compiles, cuBLAS picks its kernels
                for _ in range(2):
                    with region(MODEL_FORWARD):
                        self.forward(bucket)
                    self._stamped(bucket)  # a profiler sees these launches too: each has its stamps' line
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, capture_error_mode=mode):
                # Stream capture records on this thread: every node is made inside forward and its parts.
                with region(MODEL_FORWARD):
                    self.outputs[bucket] = self.forward(bucket)
            self.graphs[bucket] = graph
        torch.cuda.synchronize()
        if self.host_tokens is not None:  # the warm-up runs advanced the device's count of steps
            self.host_tokens.reset()
        if self.model.h[0].tp is not None:
            distributed.before_destroy(self.release)  # the graphs hold NCCL's communicator (see there)

    def release(self) -> None:
        """Destroy the captured graphs (their memory and what they hold of NCCL's communicator); the step then runs
        uncaptured."""
        torch.cuda.synchronize()
        if self.stamp_recorder is not None:
            self.stamp_recorder.flush()
        for graph in self.graphs.values():
            graph.reset()
        self.graphs.clear()
        self.outputs.clear()

    def run(self, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [batch, V] and greedy tokens [batch] of the step whose inputs are staged; valid until the next
        run."""
        bucket = self.bucket_for(batch)
        graph = self.graphs.get(bucket)
        if graph is None:
            logits, greedy = self.forward(bucket)
        else:
            graph.replay()
            logits, greedy = self.outputs[bucket]
        if self.host_tokens is not None:
            self.host_rows = self.host_tokens.launched(bucket)
        self._stamped(bucket)
        if batch < bucket:  # (a slice is host time: most steps fill their bucket, batch 1's always)
            logits, greedy = logits[:batch], greedy[:batch]
        return logits, greedy

    def _stamped(self, bucket: int) -> None:
        """After a step that ran the one-row CUDA kernels with stamps: queue their stamps for the stamps file."""
        if self.stamp_recorder is not None and bucket == 1:
            self.stamp_recorder.after_step()

    def replay(self, bucket: int) -> None:
        """Replay a bucket's graph on whatever its static inputs hold (a measurement hook, scripts/bench_*.py)."""
        self.graphs[bucket].replay()
        if self.host_tokens is not None:
            self.host_rows = self.host_tokens.launched(bucket)
