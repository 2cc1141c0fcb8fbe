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
engine launch it before reading this step's tokens (the overlapped decode, `roseinfer.model_runner`). Otherwise the host stages
all three rows again.

Inside the graph, the linears of small buckets run as the small-batch GEMV kernel or, in buckets 16 and 32, the
skinny GEMM, and in buckets 48 and 64 as a CUTLASS GEMM that loads its weights before its PDL wait
(`roseinfer.linears`, `roseinfer.cuda_ext.cutlass_gemm`),
residual adds and LayerNorms run as one Triton kernel each (`roseinfer.model.residual_layer_norm`),
the greedy tokens come from a split Triton argmax (`roseinfer.kernels.argmax`), and the KV append uses Triton at
every batch size (done by the paged-attention kernel under `--paged-attn`): in a graph a launch costs nothing,
which is what the eager path's thresholds are about.

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

import atexit
import bisect
import dataclasses
from dataclasses import dataclass

import torch

from roseinfer import distributed
from roseinfer.block_tables import BlockTables
from roseinfer.cuda_ext import cutlass_gemm, fused_attn, fused_mlp
from roseinfer.cuda_ext.fused_attn import AttnScratch
from roseinfer.cuda_ext.fused_mlp import MlpScratch
from roseinfer.cuda_ext.recorder import StampedKernel, StampRecorder
from roseinfer.cuda_ext.stamps import StampLog, stamps_path
from roseinfer.kernels import triton_available
from roseinfer.kernels.gemv import ALLREDUCE_KERNEL
from roseinfer.kernels.pdl import pdl_scope
from roseinfer.kernels.skinny_gemm import SkinnyScratch
from roseinfer.kv_cache import KVCache
from roseinfer.kv_context import StaticDecodeKV
from roseinfer.linears import small_batch_gemv
from roseinfer.names import ALLREDUCE_KERNEL_REGION_NAMES
from roseinfer.tracing import ARGMAX, MODEL_FORWARD, STATE, region


def batch_buckets(max_batch: int) -> list[int]:
    """1, 2, 4, 8, then every multiple of 16 below max_batch, then max_batch itself."""
    return sorted({b for b in (1, 2, 4, 8) if b < max_batch} | set(range(16, max_batch, 16)) | {max_batch})


# Models at most this wide (GPT-2 small) take PDL in the buckets above PDL_NARROW_ABOVE rows up to
# `GraphKernels.pdl_narrow_max_batch` (measured at 48 and 64). Up to 32 rows the GEMV's and the skinny GEMM's rules
# decide, as before: with `skinny_gemm_max_batch=0` buckets 16 and 32 run cuBLAS and plain launches.
PDL_NARROW_WIDTH = 768
PDL_NARROW_ABOVE = 32
# The CUTLASS GEMM's rows: above the skinny GEMM's 32, up to one 64-token tile
CUTLASS_ABOVE = 32
CUTLASS_MAX_BATCH = cutlass_gemm.MAX_ROWS
# K per part of the linears there that a residual add reads (`GraphKernels.cutlass_split_k`)
CUTLASS_SPLIT_K = 768


@dataclass(frozen=True)
class GraphKernels:
    """The fast path's kernel choices inside a captured step. The engine uses the defaults, every one measured
    faster than the design before it (docs/BENCHMARKS.md, issue 27); the earlier designs are no engine options.
    These fields are the measurement hook that scripts/bench_graph_step.py (its numbered variants) and the GPU tests
    that compare a kernel with the one before it pass to `ModelRunner.use_static_decode(kernels=)`."""

    append_min_batch: int | None = (
        None  # Triton KV append from this batch size (None: the block manager's rule)
    )
    fused_add_layernorm: bool = (
        True  # residual add + LayerNorm (and the argmax) as Triton kernels, where available
    )
    gelu_epilogue: bool = True  # the GELU in the c_fc GEMM's epilogue (CUDA, half precision)
    append_in_attention: bool = True  # the paged-attention kernel writes the new K/V (no append kernel)
    # Buckets of at most this many rows run their linears as the small-batch GEMV kernel (bias and GELU in its
    # epilogue; `roseinfer.linears`), larger ones on the skinny GEMM, the CUTLASS GEMM or cuBLAS (below); 0: none.
    gemv_max_batch: int = 8
    # The step's Triton kernels (GEMV, add + LayerNorm, paged attention) as programmatic dependent launches: each
    # starts while the one before finishes, the GEMV's weight loads in flight before it waits
    # (`roseinfer.kernels.pdl`; Hopper and later). False: plain launches (before Hopper they are plain anyway).
    pdl: bool = True
    # PDL in buckets of at most this many rows only (None: every bucket). Its gain is the fixed cost per kernel
    # it hides, which counts where the GEMV's few-microsecond kernels run (buckets up to 8); at bucket 64 on the
    # H100 gpt2-medium ran 2.2% slower with PDL than without and GPT-2 small at 512 rows 0.4% (docs/BENCHMARKS.md,
    # issue 27 round 2): there the add + LayerNorm kernels launched early most likely take SMs from cuBLAS's GEMMs.
    pdl_max_batch: int | None = 8
    # ... and in the buckets above PDL_NARROW_ABOVE rows up to this many for models at most PDL_NARROW_WIDTH wide
    # (0: none), where the add + LayerNorm kernels between cuBLAS's GEMMs become dependent launches. On the H100
    # GPT-2 small's steps at 48 and 64 rows replayed 1 to 2% faster (8 to 11 us at pasts of 65 to 512 tokens),
    # gpt2-medium's at 64 rows 1 to 2.4% slower (docs/BENCHMARKS.md, session 16). 0: plain launches there, as before.
    pdl_narrow_max_batch: int = 64
    # PDL for the paged-attention kernel too (off: at batch 1 it made long contexts slower; `pdl_scope`)
    pdl_attention: bool = False
    # With PDL, the attention kernel launched plainly but releasing attn_proj early, whose weight loads then
    # overlap the attention (`pdl_attention_release`): at batch 1 on the H100 (split kernel) a step 10 us faster.
    # Only in the buckets whose attn_proj is a Triton kernel (`attention_release_in`).
    pdl_attention_release: bool = True
    # With PDL, the split attention kernel where each slice is one past block (batches 1 and 2 for GPT-2 small)
    # launched as a dependent, each slice loading its block before it waits, i.e. while c_attn's GEMV runs
    # (`pdl_attention_prefetch`): on the H100 a batch-1 step 11% faster (docs/BENCHMARKS.md, issue 27 round 3).
    # False: launched plainly, as before.
    pdl_attention_prefetch: bool = True
    # With PDL, a one-row GEMV releases the kernel after it as it starts rather than after its wait
    # (`pdl_early_release`): more kernels in flight, each loading its weights while the ones before it run. On the
    # H100 a batch-1 step of gpt2-medium 7% faster (docs/BENCHMARKS.md, issue 27 round 4). False:
    # each releases the next after its own wait, as before.
    pdl_early_release: bool = True
    # The Triton argmax's second kernel writes the next step's token ids and past lengths (no copy and add after)
    argmax_advances: bool = True
    # Under --paged-attn, buckets whose sequences x heads leave most SMs idle split each past over several
    # programs, merged in the same launch (`roseinfer.kernels.split_attention`). False: one program per head, as before.
    split_attention: bool = True
    # The split kernel's short-past rule: pasts of at most this many blocks unsplit (None: `pick_serial_blocks`;
    # a measurement hook for scripts/bench_graph_step.py)
    split_serial_blocks: int | None = None
    # Under --paged-attn, where the one-pass kernel's (sequence, head) programs are many (from 768) and it does not
    # release attn_proj early (`attention_release_in`), each takes 16 past tokens an iteration on one warp rather
    # than a whole block on four, so short and partly filled blocks cost what their live tokens do; below 256, whole
    # blocks with a third pipeline stage
    # (`roseinfer.kernels.paged_attention.pick_attention_tile`; batch 512 on the H100: a past of 65 tokens 70.6 ->
    # 42.3 us a layer). False: whole blocks, two stages, everywhere, as before.
    attention_chunks: bool = True
    # At one row, the residual add + LayerNorm in front of c_attn and c_fc in the GEMV's prologue, one kernel
    # fewer each (`roseinfer.linears.norm_linear`). False: its own kernel, as before.
    norm_gemv: bool = True
    # At one row, with norm_gemv, the first block's c_attn GEMV gathers its input rows from the embedding tables in
    # its prologue (the token id and position are the step's inputs, read before its wait): the two embedding
    # kernels go (`roseinfer.linears.embedding_gather_applies`). False: two embedding kernels, as before.
    embedding_gather: bool = True
    # At one row, with norm_gemv, the lm_head as the GEMV with ln_f in its prologue (no LayerNorm kernel; on the
    # H100 the GEMV moves GPT-2's 77 MB lm_head 13% faster than cuBLAS) and, with PDL, the argmax's two kernels as
    # dependent launches after it (`roseinfer.linears.norm_lm_head`). False: ln_f's kernel and cuBLAS, as before.
    lm_head_gemv: bool = True
    # Buckets of at most this many rows run the linears the GEMV does not take as the skinny GEMM (tensor cores,
    # split-K in one kernel; `roseinfer.kernels.skinny_gemm`), larger ones on the CUTLASS GEMM (below) or cuBLAS;
    # 0: never, as before.
    # At 64 rows on the H100 it beat cuBLAS by less than 1.5 us a linear and c_fc not at all, and the step with it
    # and PDL was slower (docs/BENCHMARKS.md, issue 27 round 6).
    skinny_gemm_max_batch: int = 32
    # With PDL, the skinny GEMM's buckets launch the step's Triton kernels as dependents too (beyond
    # pdl_max_batch): each skinny GEMM then loads its weights while the kernel before it runs.
    skinny_gemm_pdl: bool = True
    # At one row, with norm_gemv and lm_head_gemv, a 768-wide block's MLP (ln_2, c_fc, GELU, mlp_proj) as one
    # split-K CUDA kernel (`roseinfer.cuda_ext.fused_mlp`, built at first use) where it is built; its float32 output
    # goes to the next norm GEMV's prologue. False (`--no-cuda-mlp`): the norm GEMV and the GEMV, two Triton kernels.
    cuda_mlp: bool = True
    # At one row, likewise, a 768-wide block's attention half (ln_1, c_attn, the KV append, attention, attn_proj)
    # as one CUDA kernel, a cluster of blocks per head (`roseinfer.cuda_ext.fused_attn`); its float32 output goes
    # to the MLP after it. False (`--no-cuda-attn`): the norm GEMV, the split attention and the GEMV (Triton).
    cuda_attn: bool = True
    # Buckets of more than CUTLASS_ABOVE (32) and at most this many rows run their float16 linears as the
    # CUTLASS GEMM that loads its weights before its PDL wait (`roseinfer.cuda_ext.cutlass_gemm`, built at first
    # use; cuBLAS where it is not built), and launch their Triton kernels as programmatic dependents. 0
    # (`--no-cutlass-gemm`): cuBLAS and the PDL rules above, as before.
    cutlass_gemm_max_batch: int = CUTLASS_MAX_BATCH
    # In those buckets the paged attention is a dependent launch too: it starts while c_attn finishes, and releases
    # attn_proj as it starts, whose weights then load beside it. GPT-2 small's step at 64 rows and a past of 256
    # on an H200: 513.4 -> 491.7 us (docs/BENCHMARKS.md, session 44). False: launched plainly there.
    cutlass_pdl_attention: bool = True
    # In those buckets attn_proj and mlp_proj, whose reader is the residual add + LayerNorm, split K into float32
    # parts of about this many (`roseinfer.linears.linear_to_residual`): S times the blocks in one launch, and that
    # reader adds the parts. 0: one part, the bias in the GEMM's epilogue, as before.
    cutlass_split_k: int = CUTLASS_SPLIT_K

    @classmethod
    def of(cls, cfg) -> GraphKernels:
        """The engine's choices for an EngineConfig: the defaults, less the CUDA C++ kernels its switches turn off
        (`--no-cuda-mlp`, `--no-cuda-attn`, `--no-cutlass-gemm`)."""
        return cls(
            cuda_mlp=cfg.cuda_mlp,
            cuda_attn=cfg.cuda_attn,
            cutlass_gemm_max_batch=CUTLASS_MAX_BATCH if cfg.cutlass_gemm else 0,
        )

    def pdl_in(self, bucket: int, width: int) -> bool:
        """Whether the step of a bucket of `bucket` rows, of a model `width` wide, launches its Triton kernels as
        programmatic dependent launches."""
        return self.pdl and (
            self.pdl_max_batch is None
            or bucket <= self.pdl_max_batch
            or (width <= PDL_NARROW_WIDTH and PDL_NARROW_ABOVE < bucket <= self.pdl_narrow_max_batch)
            or (self.skinny_gemm_pdl and bucket <= self.skinny_gemm_max_batch)
            or self.cutlass_in(bucket)
        )

    def cutlass_in(self, bucket: int) -> bool:
        """Whether a bucket's linears may run as the CUTLASS GEMM (where it fits and is built): above CUTLASS_ABOVE
        rows (the GEMV's and the skinny GEMM's buckets keep their kernels; a skinny GEMM asked for beyond 32 rows
        runs first where `skinny_wins`)."""
        return CUTLASS_ABOVE < bucket <= min(self.cutlass_gemm_max_batch, CUTLASS_MAX_BATCH)

    def attention_release_in(self, bucket: int) -> bool:
        """Whether the attention releases the kernel after it early in this bucket (with PDL on there): only in the
        GEMV's and the skinny GEMM's buckets, where attn_proj runs as a Triton kernel, a dependent launch that loads
        its weights before it waits (where `roseinfer.linears` picks it: e.g. not with `gemv_max_batch=0` at up to 8 rows,
        nor for a tensor-parallel attn_proj's narrow input). cuBLAS's GEMM is launched plainly, so in its buckets
        the release gains nothing and would only keep the attention's 16-token tiles off
        (`pick_attention_tile(shares_sms=)`). In the CUTLASS GEMM's buckets the attention is itself a dependent
        launch (`cutlass_pdl_attention`), which releases attn_proj as it starts; its tiles stay as they were."""
        return self.pdl_attention_release and bucket <= max(self.gemv_max_batch, self.skinny_gemm_max_batch)


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
        if kernels.cutlass_gemm_max_batch and not cutlass_gemm_runs(model, cache):
            # its buckets then run as before: cuBLAS, and PDL only where the rules above put it
            kernels = dataclasses.replace(kernels, cutlass_gemm_max_batch=0)
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
                atexit.register(self.stamp_recorder.close)
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        # bucket -> (logits [bucket, V], greedy tokens [bucket]), written by that bucket's graph
        self.outputs: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        if capture:
            self._capture()

    def bucket_for(self, batch: int) -> int:
        return self.buckets[bisect.bisect_left(self.buckets, batch)]

    def forward(self, bucket: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The step a graph holds: logits [bucket, V] and greedy tokens [bucket] from the static inputs, which it
        then advances to the next step's (see the module's docstring)."""
        ids, past, live = self.inputs[0, :bucket], self.inputs[1, :bucket], self.inputs[2, :bucket]
        tables = self.tables.dev[:bucket].permute(1, 0, 2)  # [L, bucket, M]
        k = self.kernels
        kv = StaticDecodeKV(
            self.cache, tables, past, self.scale, self.paged_attn, in_graph=self.capture,
            min_batch=k.append_min_batch, append_in_attention=k.append_in_attention,
            split_attention=k.split_attention, split_serial_blocks=k.split_serial_blocks,
            attention_chunks=k.attention_chunks,
        )  # fmt: skip
        pdl = k.pdl_in(bucket, self.model.cfg.n_embd)
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
                (CUTLASS_ABOVE, k.cutlass_gemm_max_batch) if k.cutlass_in(bucket) else (0, 0),
                k.cutlass_split_k,
            ),
            pdl_scope(
                pdl,
                k.pdl_attention or (k.cutlass_pdl_attention and k.cutlass_in(bucket)),
                k.attention_release_in(bucket),
                k.pdl_attention_prefetch,
                k.pdl_early_release,
            ),
        ):
            logits = self.model(ids, past, kv, fused=self.fused, gelu_epilogue=k.gelu_epilogue)  # [bucket, V]
        with region(ARGMAX):
            if self.fused:
                from roseinfer.kernels.argmax import argmax_triton

                # dependent launches after the lm_head GEMV (one row), which is one itself under PDL
                after_gemv = pdl and k.lm_head_gemv and bucket == 1
                if k.argmax_advances:  # its second kernel leaves the next step's ids and past lengths too
                    return logits, argmax_triton(
                        logits, advance=(ids, past, live), pdl=after_gemv
                    )  # [bucket]
                greedy = argmax_triton(logits, pdl=after_gemv)  # [bucket]
            else:
                greedy = torch.argmax(logits, dim=-1)  # [bucket]
            ids.copy_(greedy)
            past.add_(live)
        return logits, greedy

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
        self._stamped(bucket)
        return logits[:batch], greedy[:batch]

    def _stamped(self, bucket: int) -> None:
        """After a step that ran the one-row CUDA kernels with stamps: queue their stamps for the stamps file."""
        if self.stamp_recorder is not None and bucket == 1:
            self.stamp_recorder.after_step()

    def replay(self, bucket: int) -> None:
        """Replay a bucket's graph on whatever its static inputs hold (a measurement hook, scripts/bench_*.py)."""
        self.graphs[bucket].replay()
