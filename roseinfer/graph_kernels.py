"""The captured decode step's kernel choices (`GraphKernels`): which kernel runs each part of the step in which
batch bucket, and which launches are programmatic dependents.

`roseinfer.cuda_graphs.DecodeGraphs` captures each bucket's step with these choices; the engine uses the defaults
(`GraphKernels.of(cfg)`: less the CUDA C++ kernels an EngineConfig switches off). Each field is a design measured
faster than the one before it (docs/BENCHMARKS.md), kept as a field so that scripts/bench_graph_step.py's numbered
variants (scripts/graph_step_variants.py) and the GPU tests can rebuild the earlier designs beside it; none is an
engine option.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from roseinfer.cuda_ext import cutlass_gemm
from roseinfer.kernels.argmax import ARGMAX_WARPS

# Models at most this wide (GPT-2 small) take PDL in the buckets above PDL_NARROW_ABOVE rows up to
# `GraphKernels.pdl_narrow_max_batch` (measured at 48 and 64). Up to 32 rows the GEMV's and the skinny GEMM's rules
# decide, as before: with `skinny_gemm_max_batch=0` buckets 16 and 32 run cuBLAS and plain launches.
PDL_NARROW_WIDTH = 768
PDL_NARROW_ABOVE = 32
# The CUTLASS GEMM's buckets in the engine: above the skinny GEMM's 32 rows, up to CUTLASS_MAX_BATCH (the kernel
# takes up to `cutlass_gemm.MAX_ROWS`; why all of them: `GraphKernels.cutlass_gemm_max_batch`)
CUTLASS_ABOVE = 32
CUTLASS_MAX_BATCH = 512
# ... and under tensor parallelism, whose steps were not measured beyond it (`roseinfer.cuda_graphs.DecodeGraphs`)
CUTLASS_MAX_BATCH_TP = 256
# K per part of the linears there that a residual add reads (`GraphKernels.cutlass_split_k`)
CUTLASS_SPLIT_K = 768
# ... and the fewest parts there in the buckets up to 64 rows (`GraphKernels.cutlass_min_splits`)
CUTLASS_MIN_SPLITS = 3
# The buckets whose step runs as two halves on two streams (`GraphKernels.halves_from`, `halves_wide_from`)
HALVES_FROM = 208
HALVES_MAX_BATCH = 256
HALVES_WIDE_FROM = 512
HALVES_WIDE_MAX_BATCH = 512
# Step parts of at least this many rows run the CUTLASS GEMM on its shallow pipeline
# (`GraphKernels.cutlass_shallow_from`): batch 512's halves and the one-stream buckets 304 to 496 but 464, 480
CUTLASS_SHALLOW_FROM = 256
# ... but the one-stream buckets of these rows run cuBLAS, measured faster there
# (`GraphKernels.cutlass_cublas_rows`)
CUTLASS_CUBLAS_ROWS = frozenset({272, 288, 464, 480})


@dataclass(frozen=True)
class GraphKernels:
    """The fast path's kernel choices inside a captured step. The engine uses the defaults, every one measured
    faster than the design before it (docs/BENCHMARKS.md, issue 27); the earlier designs are no engine options.
    These fields are the measurement hook that scripts/bench_graph_step.py (its numbered variants,
    scripts/graph_step_variants.py) and the GPU tests that compare a kernel with the one before it pass to
    `ModelRunner.use_static_decode(kernels=)`."""

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
    # ... and writes the greedy tokens into pinned host memory (`roseinfer.host_tokens`): the host no longer copies
    # them out after the replay, a copy the next replay waited behind. On an H200 batch 1 0.137-0.141 -> 0.128 ms a
    # token (4 of 6 runs; in two the host set the pace), workload (a) 0.389-0.394 -> 0.384-0.386
    # (docs/BENCHMARKS.md, session 59). False: copied out after the step, as before.
    argmax_to_host: bool = True
    # The argmax's first kernel's warps a program of 4,096 logits (`argmax.ARGMAX_WARPS`: 4; 8 before session 49)
    argmax_warps: int = ARGMAX_WARPS
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
    # ... and, with argmax_advances, the greedy token folded into that GEMV: each logit, packed with its column,
    # goes by an atomic max into one of 256 words, and one small kernel reads them and leaves the argmax's outputs
    # (`roseinfer.kernels.argmax.LmHeadArgmax`): the argmax's pass over the logits and one launch go, a replay on an
    # H200 1.1-1.4 us shorter (docs/BENCHMARKS.md, session 61). False: the argmax's two kernels after the GEMV.
    lm_head_argmax: bool = True
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
    # (`--no-cutlass-gemm`): cuBLAS and the PDL rules above, as before. GPT-2 small's step on an H200 with these
    # buckets up to 64 rows (cuBLAS above) and up to 128, 256, 512: batch 96 512.0 -> 402.3 us a replay, 128 487.0
    # -> 361.8 and 700.5 -> 566.1 (pasts 64, 256), 256 732.3 -> 708.4, but 512 821.3 -> 946.5 and 1,110.4 ->
    # 1,214.8 (pasts 64, 128: there the 64-token tiles make c_attn and c_fc 288 and 384 blocks of one an SM;
    # docs/BENCHMARKS.md, session 47). Above 256 rows on the shallow pipeline (`cutlass_shallow_from`), which
    # holds several blocks an SM, it beats cuBLAS (session 54): up to 512, less `cutlass_cublas_rows`.
    cutlass_gemm_max_batch: int = CUTLASS_MAX_BATCH
    # ... but for models wider than PDL_NARROW_WIDTH (768: GPT-2 small) only up to this many rows: gpt2-medium's
    # step on an H200 at a past of 128, CUTLASS against cuBLAS: batch 96 1,133.2 -> 946.7 us, 128 1,238.6 ->
    # 1,025.6, but 160 1,350.3 -> 1,449.9 and 256 1,730.9 -> 1,752.0 (docs/BENCHMARKS.md, session 48).
    cutlass_wide_max_batch: int = 128
    # In those buckets the paged attention is a dependent launch too: it starts while c_attn finishes, and releases
    # attn_proj right after its wait, whose weights then load beside it. GPT-2 small's step at 64 rows and a past
    # of 256 on an H200: 513.4 -> 491.7 us (docs/BENCHMARKS.md, session 44). False: launched plainly there.
    cutlass_pdl_attention: bool = True
    # In those buckets attn_proj and mlp_proj, whose reader is the residual add + LayerNorm, split K into float32
    # parts of about this many (`roseinfer.linears.linear_to_residual`): S times the blocks in one launch, and that
    # reader adds the parts. 0: one part, the bias in the GEMM's epilogue, as before.
    cutlass_split_k: int = CUTLASS_SPLIT_K
    # ... and into at least this many parts in buckets of at most cutlass_min_splits_max_batch rows: attn_proj,
    # whose K of 768 (GPT-2 small) is otherwise one part, 12 blocks at 64 rows each down all of K. On an H200, GPT-2
    # small's step at 64 rows and pasts of 256 and 512: 401.8 -> 395.6 and 543.2 -> 536.4 us (3 parts), at 48 rows
    # 380.1 -> 373.0; gpt2-medium's (1,024 deep: 2 parts, whole 64-deep tiles) at 64 rows 925.3 -> 904.4; 2 parts
    # at 128 rows -0.2%, at 224 (the halves) +0.4% (docs/BENCHMARKS.md, session 50). 1: as the K split alone says.
    cutlass_min_splits: int = CUTLASS_MIN_SPLITS
    cutlass_min_splits_max_batch: int = 64
    # Parts of a step of at least this many rows run the CUTLASS GEMM on its shallow pipeline
    # (`cutlass_gemm.SHALLOW_STAGES`: 4 stages, several of its blocks, or the attention's, on an SM) rather than on
    # as many stages as shared memory holds (one block an SM). GPT-2 small's step on an H200 against cuBLAS (the
    # engine before; us a replay, past 64): one stream, batch 320 642.9 -> 622.0, 384 707.3 -> 678.5, 416 749.4 ->
    # 721.8, 448 777.0 -> 732.1, 480 783.9 -> 786.6, 288 (past 128) 774.2 -> 772.5; but on one stream at 160 and
    # 192 rows it was 2.8% and 1.6% slower than the deep pipeline, and the halves of 104 to 128 rows 4.8 to 5.1%
    # (docs/BENCHMARKS.md, session 54). So from 256: the smallest part measured faster on it (batch 512's halves),
    # and no one-stream bucket below 272 unmeasured on it (odd buckets of 193 to 255 rows keep the deep form). Its 4
    # stages hold 4 of a 768-deep K's 12 tiles, so it loads only those before its wait. 0: never.
    cutlass_shallow_from: int = CUTLASS_SHALLOW_FROM
    # Steps (or step parts) of these rows run their linears on cuBLAS rather than the CUTLASS GEMM, with plain
    # launches, as before it. GPT-2 small's step on an H200 at a past of 64, cuBLAS against the shallow CUTLASS
    # GEMM (us a replay): 272 602.1 / 618.7 (the deep CUTLASS GEMM 619.6, its halves 670.9), 288 608.6 / 622.4
    # (at a past of 128 774.2 / 772.5, session 54), 464 772.4-772.9 / 782.5-783.8, 480 783.0-784.5 / 787.3-787.6;
    # the shallow GEMM won at every other bucket from 304 to 496 (304 632.8 / 616.6 ... 432 757.9 / 725.1, 496
    # 810.0 / 793.0; docs/BENCHMARKS.md, session 55). Empty: the CUTLASS GEMM in all of its buckets.
    cutlass_cublas_rows: frozenset[int] = CUTLASS_CUBLAS_ROWS
    # Under --paged-attn, where the one-pass kernel runs, the CUDA kernel that brings each (block, head) tile of
    # K and V in by one bulk copy (`roseinfer.cuda_ext.paged_attn`, where it fits and is built); as a dependent
    # launch its first tiles load before it waits. False (`--no-cuda-paged-attn`): the Triton kernel.
    cuda_paged_attention: bool = True
    # ... its tiles in flight a (sequence, head) (None: `paged_attn.pick_stages`; a measurement hook)
    cuda_attention_stages: int | None = None

    # Buckets of HALVES_FROM to HALVES_MAX_BATCH rows of models at most PDL_NARROW_WIDTH wide run their step as two
    # halves of the batch on two streams inside the graph, each half's kernels those of a bucket of its rows
    # (`roseinfer.two_halves`). Why there: from 193 rows c_attn's 64-row tiles (GPT-2 small: 36 column tiles) are
    # 144 blocks, two waves on 132 SMs, and its time a step doubled; two halves of at most 128 rows each take one
    # wave, and the other half's kernels fill the SMs the first leaves. GPT-2 small's step on an H200 at a past of
    # 128: batch 208 678.7 -> 611.7 us, 224 696.3 -> 625.0, 240 707.1 -> 645.4, 256 709.9 -> 664.3 (pasts 64 and
    # 256: 579.2 -> 539.7, 996.9 -> 930.7); but 128 435.4 -> 451.6, 160 +0.3%, 192 +1.3%, 320 and 384 +9% and +5%,
    # 512 +9% (docs/BENCHMARKS.md, session 48). halves_from = halves_wide_from = 0: one stream everywhere.
    halves_from: int = HALVES_FROM
    halves_max_batch: int = HALVES_MAX_BATCH
    # ... and buckets of halves_wide_from to halves_wide_max_batch rows (0: none), whose halves of 256 rows run the
    # shallow GEMM: there one half's GEMM blocks share SMs with the other half's attention (memory
    # bound beside tensor-core bound). Batch 512 on an H200, pasts 64 / 128: 818.6 / 1,107.9 us (cuBLAS, one
    # stream) -> 802.7 / 1,074.6 (the shallow GEMM, one stream) -> 776.4 / 1,058.8 (its halves); the halves of
    # the deep GEMM 896.2 / 1,167.0. Below 512 the shallow GEMM's one stream won: 320 622.0 against 667.4 as
    # halves, 384 678.5 / 692.0, 416 721.8 / 786.8, 448 732.1 / 792.2, 480 786.6 / 790.4 (session 54).
    halves_wide_from: int = HALVES_WIDE_FROM
    halves_wide_max_batch: int = HALVES_WIDE_MAX_BATCH
    # In the CUTLASS GEMM's buckets of models at most PDL_NARROW_WIDTH wide (one device), the residual add +
    # LayerNorm kernel runs one warp a row and releases the kernel after it before its own wait
    # (`pdl_layer_norm_early`), so that the next GEMM's weights load while it waits. GPT-2 small's step on an
    # H200, us a replay (variants 68 -> 69): batch 48 310.8 -> 297.9, 64 396.9 / 540.5 -> 373.9 / 520.8 (pasts
    # 256 / 512), 128 434.7 -> 425.1, 256 663.5 -> 657.2, 384 885.5 -> 883.2, 512 1,066.8 -> 1,047.8 (past 128).
    # At 64 and 512 rows the release alone gave about half of that and one warp alone nearly nothing; for
    # gpt2-medium at 64 rows both together changed nothing and the release alone was 1.9% slower
    # (docs/BENCHMARKS.md, session 56). False: four warps a row, released after the wait.
    layer_norm_early: bool = True

    @classmethod
    def of(cls, cfg) -> GraphKernels:
        """The engine's choices for an EngineConfig: the defaults, less the CUDA C++ kernels its switches turn off
        (`--no-cuda-mlp`, `--no-cuda-attn`, `--no-cutlass-gemm`, `--no-cuda-paged-attn`; without the CUTLASS GEMM
        the step runs on one stream)."""
        kernels = cls(
            cuda_mlp=cfg.cuda_mlp, cuda_attn=cfg.cuda_attn, cuda_paged_attention=cfg.cuda_paged_attn
        )
        return kernels.for_step(cfg.cutlass_gemm, tensor_parallel=False)  # (the runner knows the ranks)

    def for_step(self, cutlass_runs: bool, tensor_parallel: bool) -> GraphKernels:
        """These choices as a step can take them: where the CUTLASS GEMM is off (`--no-cutlass-gemm`) or cannot run
        (no wheel, not Hopper, not float16) its buckets run as before it, cuBLAS on one stream (the halves make up for its tiles' waves, and at
        512 rows need its shallow form); under tensor parallelism, which runs no halves (its ranks' all-reduces
        must come in one order), the GEMM stops at CUTLASS_MAX_BATCH_TP rows on its deep form, as measured, and
        the add + LayerNorm stays as it was before `layer_norm_early` (measured on one device only)."""
        kernels = self
        if not cutlass_runs:
            kernels = dataclasses.replace(
                kernels, cutlass_gemm_max_batch=0, halves_from=0, halves_wide_from=0
            )
        if tensor_parallel:
            rows = min(kernels.cutlass_gemm_max_batch, CUTLASS_MAX_BATCH_TP)
            kernels = dataclasses.replace(
                kernels, cutlass_gemm_max_batch=rows, cutlass_shallow_from=0, layer_norm_early=False
            )
        return kernels

    def pdl_in(self, bucket: int, width: int) -> bool:
        """Whether the step of a bucket of `bucket` rows, of a model `width` wide, launches its Triton kernels as
        programmatic dependent launches."""
        return self.pdl and (
            self.pdl_max_batch is None
            or bucket <= self.pdl_max_batch
            or (width <= PDL_NARROW_WIDTH and PDL_NARROW_ABOVE < bucket <= self.pdl_narrow_max_batch)
            or (self.skinny_gemm_pdl and bucket <= self.skinny_gemm_max_batch)
            or self.cutlass_in(bucket, width)
        )

    def layer_norm_early_in(self, bucket: int, width: int) -> bool:
        """Whether a step part of `bucket` rows, of a model `width` wide, runs `layer_norm_early`'s add +
        LayerNorm (only where its kernels are dependent launches: `cutlass_in` implies `pdl_in`; not under tensor
        parallelism, where it was not measured: `for_step`)."""
        return (
            self.layer_norm_early
            and width <= PDL_NARROW_WIDTH
            and self.pdl
            and self.cutlass_in(bucket, width)
        )

    def cutlass_in(self, bucket: int, width: int) -> bool:
        """Whether a bucket's linears, of a model `width` wide, may run as the CUTLASS GEMM (where it fits and is
        built): above CUTLASS_ABOVE rows (the GEMV's and the skinny GEMM's buckets keep their kernels; a skinny GEMM
        asked for beyond 32 rows runs first where `skinny_wins`), up to `cutlass_gemm_max_batch` rows, or
        `cutlass_wide_max_batch` for models wider than PDL_NARROW_WIDTH, less `cutlass_cublas_rows`."""
        rows = self.cutlass_gemm_max_batch
        if width > PDL_NARROW_WIDTH:
            rows = min(rows, self.cutlass_wide_max_batch)
        return (
            CUTLASS_ABOVE < bucket <= min(rows, cutlass_gemm.MAX_ROWS)
            and bucket not in self.cutlass_cublas_rows
        )

    def halves_in(self, bucket: int, width: int) -> bool:
        """Whether a bucket's step, of a model `width` wide, runs as two halves (`halves_from`): only where each
        half is past the GEMV's and the skinny GEMM's buckets, whose split-K scratch a step's kernels share."""
        half = bucket // 2
        return (
            (
                0 < self.halves_from <= bucket <= self.halves_max_batch
                or 0 < self.halves_wide_from <= bucket <= self.halves_wide_max_batch
            )
            and width <= PDL_NARROW_WIDTH
            and bucket % 2 == 0
            and half > max(self.gemv_max_batch, self.skinny_gemm_max_batch)
        )

    def attention_release_in(self, bucket: int) -> bool:
        """Whether the attention releases the kernel after it early in this bucket (with PDL on there): only in the
        GEMV's and the skinny GEMM's buckets, where attn_proj runs as a Triton kernel, a dependent launch that loads
        its weights before it waits (where `roseinfer.linears` picks it: e.g. not with `gemv_max_batch=0` at up to 8 rows,
        nor for a tensor-parallel attn_proj's narrow input). cuBLAS's GEMM is launched plainly, so in its buckets
        the release gains nothing and would only keep the attention's 16-token tiles off
        (`pick_attention_tile(shares_sms=)`). In the CUTLASS GEMM's buckets the attention is itself a dependent
        launch (`cutlass_pdl_attention`), which releases attn_proj right after its wait; its tiles stay as they
        were."""
        return self.pdl_attention_release and bucket <= max(self.gemv_max_batch, self.skinny_gemm_max_batch)
