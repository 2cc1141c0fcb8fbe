"""The numbered variants of scripts/bench_graph_step.py: the captured decode step's kernel choices
(`GraphKernels`) as the engine made them at each step of its fast path, each adding one change to the one before:
  1. as at the end of session 2: torch KV append below 128 rows, torch residual add + LayerNorm, GEMM then a
     GELU kernel;
  2. + the Triton KV append inside the graph at every batch size;
  3. + residual add and LayerNorm as one Triton kernel;
  4. + the GELU in the c_fc GEMM's epilogue (cuBLASLt);
  5. + the KV append done by the paged-attention kernel (no append kernel): the engine of session 3;
  6. + the small-batch GEMV kernel for the linears of buckets up to 8 rows (issue 27);
  7. + programmatic dependent launches of the step's GEMV and add + LayerNorm kernels (issue 27, first step);
  8. + PDL for the paged-attention kernel too (issue 27; off in the engine);
  9. 7 + the split-context attention kernel at small batches (issue 27, second step);
 10. + the add + LayerNorm in the c_attn / c_fc GEMV's prologue at batch 1;
 11. 10 + PDL for the (split) attention kernel too;
 12. 10 + the split attention kernel, launched plainly, releasing the attn_proj GEMV early: the engine of session 7
     (round 2: pasts of at most `SERIAL_BLOCKS` blocks unsplit from batch 4, PDL in buckets of at most 8 rows);
 13. 12 without the split attention (the engine's `--no-split-attn` until issue 42);
 14. 12 with every past of more than one block split (round 1's rule);
 15. 12 with pasts of at most 3 blocks unsplit at every batch the split runs at;
 16. 12 + where each slice is one past block, the split attention launched as a dependent that loads its block
     before it waits (issue 27, round 3);
 17. 16 + one-row GEMVs release the kernel after them as they start, not after their wait (issue 27, round 4);
 18. 17 + the argmax's second kernel writes the next step's token ids and past lengths (no copy, no add);
 19. 18 + at one row the first block's c_attn GEMV gathers the token and position embeddings (issue 27, round
     5);
 20. 18 + at one row the lm_head as the GEMV with ln_f in its prologue, the argmax's kernels dependent launches
     after it (round 5);
 21. 18 + both: the engine of round 5;
 22. 21 + the linears of buckets of 16 and 32 rows as the skinny GEMM on tensor cores (issue 27, round 6),
     launched plainly there as before;
 23. 22 with PDL in the skinny GEMM's buckets too: the engine of round 6;
 24. 23 with the skinny GEMM (and so PDL) in buckets up to 64 rows, where `linears.skinny_wins` says so;
 25. 23 with PDL in buckets up to 64 rows, the linears there on cuBLAS as in the engine;
 26. 24 with the skinny GEMM launched plainly at 64 rows, PDL off there as in the engine;
 27. 23 with PDL in every bucket;
 28. 23 + from 768 (sequence, head) pairs the one-pass attention takes 16 past tokens an iteration on one warp
     (where it does not release attn_proj early), below 256 whole blocks with a third pipeline stage (issue 27,
     round 7): the engine of session 14;
 29. 28 with the attention not releasing attn_proj early in the PDL buckets (a measurement hook);
 30. 23 likewise;
 31. 28 + PDL in buckets of 33 to 64 rows for models up to 768 wide (the add + LayerNorm kernels between cuBLAS's
     GEMMs dependent launches; the attention keeps its 16-token tiles, as it releases no Triton attn_proj early
     there): the engine of session 16;
 32. 31 + at one row a 768-wide block's MLP as one split-K CUDA kernel (issue 50, `roseinfer.cuda_ext.fused_mlp`;
     the Triton path where it is not built): the engine of session 24;
 33. 32 + the skinny GEMM for attn_proj and mlp_proj at 33 to 64 rows (session 42: slower);
 34. 32 + the linears of buckets of 33 to 64 rows as the CUTLASS GEMM that loads its weights before its PDL wait,
     the step's Triton kernels dependent launches there (issue 50, `roseinfer.cuda_ext.cutlass_gemm`; cuBLAS where
     it is not built);
 35. 34 + the attention a dependent launch in those buckets too (`GraphKernels.cutlass_pdl_attention`): the engine
     of session 44;
 36. 35 + attn_proj and mlp_proj in those buckets split along K into float32 parts of about 384 of K (GPT-2
     small: attn_proj 2 parts, mlp_proj 8), which the residual add + LayerNorm after them adds
     (`GraphKernels.cutlass_split_k`, `roseinfer.kernels.split_sum.SplitK`);
 37. the same, parts of about 768 (GPT-2 small: attn_proj whole, mlp_proj 4; gpt2-medium the same): the engine
     of session 45;
 38. the same, parts of about 1,024 (mlp_proj 3 parts; gpt2-medium attn_proj whole, mlp_proj 4);
 39. the same, parts of about 1,536 (mlp_proj 2 parts; gpt2-medium attn_proj whole, mlp_proj 2).
 40. 37 + the one-pass attention as the CUDA kernel of bulk copies (`roseinfer.cuda_ext.paged_attn`): the engine
     of session 46; 41-43 the same at 1, 2 and 3 tiles in flight.
 44-46. 40 + the CUTLASS GEMM's buckets (its GEMM, PDL and K split) up to 128, 256 (the engine of session 47;
     models wider than 768 up to 64) and 512 rows; 47: 45 for wider models too (gpt2-medium up to 256 rows); 48:
     45 without the K split.
 49-51. 45 + the step of its buckets as two halves of the batch on two streams (`roseinfer.two_halves`) from 256
     rows and from 128 rows up; 51: in buckets of 208 to 256 rows, and models wider than 768 on the CUTLASS GEMM
     up to 128 rows: the engine of session 48. (Session 48 also measured the halves' attention kernels taking
     turns, slower, and removed; its figures name the variants of commit 69891b6.)
 52. 51 + the argmax's first kernel on 4 warps a program rather than 8: the engine of session 49.
 53, 54. 52 + the linears to the residual split into at least 2 and 3 K parts (attn_proj: 2 or 3 parts rather than
     one), in every CUTLASS bucket; 55: 54 in the buckets up to 64 rows: the engine of session 50.
 56-66. Session 54's measurements of the CUTLASS GEMM on its shallow pipeline (4 stages): 56 the deep GEMM up to
     512 rows on one stream; 57, 60, 65 the same, shallow from 257, 129 and 193 rows; 58 two halves from 208 to 512
     rows on the deep GEMM (up to 256 rows each); 59, 61, 64 the same, shallow from 129, 65 and 193 rows; 62 and 63:
     59 without the K split and with the attention's 2 tiles in flight; 66: 60 + two halves above 256 rows.
 67. 56, shallow in step parts of 256 rows and more, + bucket 512 as two halves: the engine of session 54.
 68. 67 with the one-stream buckets 272, 288, 464 and 480 on cuBLAS (`GraphKernels.cutlass_cublas_rows`): the
     engine of session 55.
 69. 68 + the add + LayerNorm of the CUTLASS GEMM's buckets (GPT-2 small) one warp a row, releasing the GEMM after
     it before its wait (`GraphKernels.layer_norm_early`): the engine of session 56.
 70. 69 + the argmax writing the greedy tokens into pinned host memory (`GraphKernels.argmax_to_host`; a replay's
     own time is that of 69, the copy it removes ran after it): the engine of session 59.
 71. 70 + at one row the greedy token folded into the lm_head GEMV (`GraphKernels.lm_head_argmax`): the engine now.
Since session 16 the attention releases attn_proj early only in the GEMV's and skinny GEMM's buckets, in every
variant: 25 and 27 (whole-block tiles) released it at 48 rows and more before, which released nothing (cuBLAS's
GEMMs are plain launches) and changed no tile. In variant 35 the attention is a dependent launch in buckets 48 and 64,
which releases the CUTLASS attn_proj as it starts; its tiles stay those of variant 34.
"""

import dataclasses

from roseinfer.graph_kernels import GraphKernels

# The second step's kernels off: what variants 1 to 8 measured before they existed.
_FIRST = dict(
    split_attention=False, norm_gemv=False, pdl_attention_release=False, pdl_attention_prefetch=False
)
# Variant -> the captured step's kernel choices (each variant adds one change to the one before).
VARIANTS = {
    1: GraphKernels(
        append_min_batch=128,
        fused_add_layernorm=False,
        gelu_epilogue=False,
        append_in_attention=False,
        gemv_max_batch=0,
        pdl=False,
    ),
    2: GraphKernels(
        fused_add_layernorm=False, gelu_epilogue=False, append_in_attention=False, gemv_max_batch=0, pdl=False
    ),
    3: GraphKernels(gelu_epilogue=False, append_in_attention=False, gemv_max_batch=0, pdl=False),
    4: GraphKernels(append_in_attention=False, gemv_max_batch=0, pdl=False),
    5: GraphKernels(gemv_max_batch=0, pdl=False),
    6: GraphKernels(pdl=False),
    7: GraphKernels(),
    8: GraphKernels(pdl_attention=True),
}
VARIANTS = {v: dataclasses.replace(k, **_FIRST) for v, k in VARIANTS.items()}
# The third step's change off: what variants 9 to 15 measured before it existed.
_SECOND = dict(pdl_attention_prefetch=False)
VARIANTS[9] = GraphKernels(norm_gemv=False, pdl_attention_release=False, **_SECOND)
VARIANTS[10] = GraphKernels(pdl_attention_release=False, **_SECOND)
VARIANTS[11] = GraphKernels(pdl_attention=True, pdl_attention_release=False, **_SECOND)
VARIANTS[12] = GraphKernels(**_SECOND)
VARIANTS[13] = GraphKernels(split_attention=False)
VARIANTS[14] = GraphKernels(split_serial_blocks=0, **_SECOND)
VARIANTS[15] = GraphKernels(split_serial_blocks=3, **_SECOND)
VARIANTS[16] = GraphKernels()  # 12 + the split attention a prefetching dependent launch
# The fourth step's changes off: what variants 1 to 16 measured before they existed.
_FOURTH = dict(pdl_early_release=False, argmax_advances=False)
VARIANTS = {v: dataclasses.replace(k, **_FOURTH) for v, k in VARIANTS.items()}
VARIANTS[17] = GraphKernels(argmax_advances=False)
VARIANTS[18] = GraphKernels()  # the engine of round 4
# The fifth step's changes off: what variants 1 to 18 measured before they existed.
VARIANTS = {
    v: dataclasses.replace(k, embedding_gather=False, lm_head_gemv=False) for v, k in VARIANTS.items()
}
VARIANTS[19] = GraphKernels(lm_head_gemv=False)
VARIANTS[20] = GraphKernels(embedding_gather=False)
VARIANTS[21] = GraphKernels()  # the engine of round 5
# The sixth step's change off: what variants 1 to 21 measured before it existed.
VARIANTS = {v: dataclasses.replace(k, skinny_gemm_max_batch=0) for v, k in VARIANTS.items()}
VARIANTS[22] = GraphKernels(skinny_gemm_pdl=False)
VARIANTS[23] = GraphKernels()  # the engine of round 6
# Measurement hooks for bucket 64 (not engine options): where the step's time goes with each change there.
VARIANTS[24] = GraphKernels(skinny_gemm_max_batch=64)
VARIANTS[25] = GraphKernels(pdl_max_batch=64)
VARIANTS[26] = GraphKernels(skinny_gemm_max_batch=64, skinny_gemm_pdl=False)
VARIANTS[27] = GraphKernels(pdl_max_batch=None)
# The seventh step's change off: what variants 1 to 27 measured before it existed.
VARIANTS = {v: dataclasses.replace(k, attention_chunks=False) for v, k in VARIANTS.items()}
VARIANTS[28] = GraphKernels()  # 23 + the attention's tile by the programs' count: the engine now
# Measurement hooks: the attention not releasing attn_proj early (PDL buckets), with and without the tile rule.
VARIANTS[29] = GraphKernels(pdl_attention_release=False)
VARIANTS[30] = GraphKernels(pdl_attention_release=False, attention_chunks=False)
# The eighth step's change off: what variants 1 to 30 measured before it existed.
VARIANTS = {v: dataclasses.replace(k, pdl_narrow_max_batch=0) for v, k in VARIANTS.items()}
VARIANTS[31] = GraphKernels()  # 28 + PDL in buckets up to 64 rows for models up to 768 wide
# The ninth step's change off: what variants 1 to 31 measured before it existed (GraphKernels.cuda_mlp defaults on).
VARIANTS = {v: dataclasses.replace(k, cuda_mlp=False) for v, k in VARIANTS.items()}
VARIANTS[32] = GraphKernels()  # 31 + the one-row MLP as one split-K CUDA kernel (issue 50): the engine now
# 32 + the skinny GEMM for attn_proj and mlp_proj at 33 to 64 rows (docs/BENCHMARKS.md, session 42: slower)
VARIANTS[33] = GraphKernels(skinny_gemm_max_batch=64)
# The tenth step's change off: what variants 1 to 33 measured before it existed (the CUTLASS GEMM defaults on).
VARIANTS = {v: dataclasses.replace(k, cutlass_gemm_max_batch=0) for v, k in VARIANTS.items()}
VARIANTS[34] = GraphKernels(
    cutlass_pdl_attention=False
)  # 32 + the CUTLASS GEMM at 33 to 64 rows (session 44)
VARIANTS[35] = GraphKernels()  # 34 + the attention a dependent launch in its buckets
# The eleventh step's change off: what variants 1 to 35 measured before it existed (the K split defaults on).
VARIANTS = {v: dataclasses.replace(k, cutlass_split_k=0) for v, k in VARIANTS.items()}
# 35 + attn_proj and mlp_proj split along K there, parts of about 384, 768 (the engine now), 1,024 and 1,536 of K
VARIANTS[36] = GraphKernels(cutlass_split_k=384)
VARIANTS[37] = GraphKernels()
VARIANTS[38] = GraphKernels(cutlass_split_k=1024)
VARIANTS[39] = GraphKernels(cutlass_split_k=1536)
# session 46: the one-pass attention as the CUDA kernel of bulk copies (`roseinfer.cuda_ext.paged_attn`)
VARIANTS = {v: dataclasses.replace(k, cuda_paged_attention=False) for v, k in VARIANTS.items()}
VARIANTS[40] = GraphKernels()  # 37 + the CUDA attention
VARIANTS[41] = GraphKernels(cuda_attention_stages=1)
VARIANTS[42] = GraphKernels(cuda_attention_stages=2)
VARIANTS[43] = GraphKernels(cuda_attention_stages=3)
# session 47: the CUTLASS GEMM's buckets (its GEMM, PDL and K split) beyond 64 rows; before it they stopped at 64
VARIANTS = {
    v: dataclasses.replace(k, cutlass_gemm_max_batch=min(k.cutlass_gemm_max_batch, 64))
    for v, k in VARIANTS.items()
}
VARIANTS[44] = GraphKernels(cutlass_gemm_max_batch=128, cutlass_wide_max_batch=128)
VARIANTS[45] = GraphKernels()  # up to 256 rows (models wider than 768: 64): the engine of session 47
VARIANTS[46] = GraphKernels(cutlass_gemm_max_batch=512, cutlass_wide_max_batch=512)
VARIANTS[47] = GraphKernels(cutlass_wide_max_batch=256)  # 45 for models wider than 768 too (gpt2-medium)
VARIANTS[48] = GraphKernels(cutlass_split_k=0)  # 45 without the K split (measured only up to 64 rows)
# session 48: two halves of the batch on two streams in buckets 208 to 256 (`roseinfer.two_halves`), and
# gpt2-medium's CUTLASS buckets up to 128 rows; before them one stream, and wider models' up to 64 rows
# (44, 46 and 47 set the wider models' rows; the others had the default's 64)
VARIANTS = {
    v: dataclasses.replace(
        k,
        halves_from=0,
        halves_max_batch=0,
        cutlass_wide_max_batch=k.cutlass_wide_max_batch if v in (44, 46, 47) else 64,
    )
    for v, k in VARIANTS.items()
}
# 45 + two halves from 256 rows up, and from 128 rows up
VARIANTS[49] = GraphKernels(halves_from=256, halves_max_batch=512, cutlass_wide_max_batch=64)
VARIANTS[50] = GraphKernels(halves_from=128, halves_max_batch=512, cutlass_wide_max_batch=64)
# two halves from 208 to 256 rows, gpt2-medium's CUTLASS up to 128: the engine of session 48
VARIANTS[51] = GraphKernels()
# session 49: the argmax's first kernel on 4 warps a program, 8 before
VARIANTS = {v: dataclasses.replace(k, argmax_warps=8) for v, k in VARIANTS.items()}
VARIANTS[52] = GraphKernels()
# session 50: attn_proj (K 768 at GPT-2 small) in at least 3 K parts in the buckets up to 64 rows, whole before
VARIANTS = {v: dataclasses.replace(k, cutlass_min_splits=1) for v, k in VARIANTS.items()}
VARIANTS[53] = GraphKernels(cutlass_min_splits=2, cutlass_min_splits_max_batch=512)  # in every CUTLASS bucket
VARIANTS[54] = GraphKernels(cutlass_min_splits=3, cutlass_min_splits_max_batch=512)
VARIANTS[55] = GraphKernels()  # up to 64 rows: the engine of session 50
# session 54: the CUTLASS GEMM on its shallow pipeline (4 stages: several blocks an SM) above 256 rows, and batch 512
# as two halves of 256 on it, so that a half's GEMM blocks and the other half's attention blocks share SMs; before
# it the GEMM's buckets stopped at 256 rows (46 set 512), on its deep pipeline, and the halves at 256
VARIANTS = {
    v: dataclasses.replace(
        k,
        cutlass_gemm_max_batch=k.cutlass_gemm_max_batch if v == 46 else min(k.cutlass_gemm_max_batch, 256),
        cutlass_shallow_from=0,
        halves_wide_from=0,
    )
    for v, k in VARIANTS.items()
}
_ONE = {"halves_wide_from": 0}  # one stream above 256 rows
_HALVES = {"cutlass_gemm_max_batch": 256, "halves_max_batch": 512, "halves_wide_from": 0}  # halves from 208
VARIANTS[56] = GraphKernels(**_ONE, cutlass_shallow_from=0)  # deep up to 512 (session 47's 46)
VARIANTS[57] = GraphKernels(**_ONE, cutlass_shallow_from=257)
VARIANTS[58] = GraphKernels(**_HALVES, cutlass_shallow_from=0)  # halves of 256, deep (session 48's 50 at 512)
VARIANTS[59] = GraphKernels(**_HALVES, cutlass_shallow_from=129)
VARIANTS[60] = GraphKernels(**_ONE, cutlass_shallow_from=129)
VARIANTS[61] = GraphKernels(**_HALVES, cutlass_shallow_from=65)  # also the halves of 104-128 rows
VARIANTS[62] = GraphKernels(**_HALVES, cutlass_shallow_from=129, cutlass_split_k=0)
VARIANTS[63] = GraphKernels(**_HALVES, cutlass_shallow_from=129, cuda_attention_stages=2)
VARIANTS[64] = GraphKernels(**_HALVES, cutlass_shallow_from=193)
VARIANTS[65] = GraphKernels(**_ONE, cutlass_shallow_from=193)
VARIANTS[66] = GraphKernels(cutlass_shallow_from=129, halves_wide_from=257)  # halves above 256 rows, shallow
# 65 + two halves at 512 rows, shallow in parts from 256 rows (measured at 193: the same on every bucket timed)
VARIANTS[67] = GraphKernels()
# session 55: the one-stream buckets 272, 288, 464 and 480 on cuBLAS (measured faster there), before it on the
# shallow CUTLASS GEMM
VARIANTS = {v: dataclasses.replace(k, cutlass_cublas_rows=frozenset()) for v, k in VARIANTS.items()}
VARIANTS[68] = GraphKernels()
# session 56: the add + LayerNorm of the CUTLASS GEMM's buckets (GPT-2 small) one warp a row, releasing the GEMM
# after it before its wait; before it four warps a row, released after the wait
VARIANTS = {v: dataclasses.replace(k, layer_norm_early=False) for v, k in VARIANTS.items()}
VARIANTS[69] = GraphKernels()
# session 59: the argmax writes the greedy tokens into pinned host memory (no copy after the replay, which runs
# outside the graph: the same replay time, a shorter step in the engine's loop); before it copied out after it
VARIANTS = {v: dataclasses.replace(k, argmax_to_host=False) for v, k in VARIANTS.items()}
VARIANTS[70] = GraphKernels()
# session 61: at one row the lm_head GEMV folds the greedy token into a few words by atomics, one kernel reads
# them; before it the argmax's two kernels read the logits
VARIANTS = {v: dataclasses.replace(k, lm_head_argmax=False) for v, k in VARIANTS.items()}
VARIANTS[71] = GraphKernels()

# Each variant's row in the tables
NAMES = {
    1: "session 2 (torch append < 128 rows, torch add + LayerNorm, GELU kernel)",
    2: "+ Triton KV append in the graph",
    3: "+ fused residual add + LayerNorm",
    4: "+ GELU epilogue",
    5: "+ KV append inside the attention kernel (session 3)",
    6: "+ small-batch GEMV linears",
    7: "+ programmatic dependent launches",
    8: "+ PDL on the attention kernel too",
    9: "7 + split-context attention",
    10: "+ add + LayerNorm in the GEMV prologue",
    11: "10 + PDL on the attention kernel",
    12: "10 + the split attention (launched plainly) releasing attn_proj early (session 7)",
    13: "12 without the split attention",
    14: "12, every past of more than one block split (round 1)",
    15: "12, pasts of at most 3 blocks unsplit",
    16: "12 + the attention a dependent launch loading its block before the wait (round 3)",
    17: "16 + one-row GEMVs release the next kernel as they start",
    18: "17 + the argmax kernel writes the next step's inputs (round 4)",
    19: "18 + the first c_attn GEMV gathers the embeddings",
    20: "18 + the lm_head GEMV with ln_f in its prologue",
    21: "18 + both (round 5)",
    22: "21 + the skinny GEMM for 9 to 32 rows, plain launches there",
    23: "21 + the skinny GEMM, PDL in its buckets (round 6)",
    24: "23 + the skinny GEMM and PDL up to 64 rows",
    25: "23 + PDL up to 64 rows (cuBLAS there)",
    26: "23 + the skinny GEMM up to 64 rows, plain launches there",
    27: "23 + PDL in every bucket",
    28: "23 + the attention's tile by its programs' count (round 7)",
    29: "28, the attention not releasing attn_proj early",
    30: "23, the attention not releasing attn_proj early",
    31: "28 + PDL up to 64 rows up to 768 wide",
    32: "31 + the one-row MLP and attention as CUDA kernels",
    33: "32 + the skinny GEMM up to 64 rows (attn_proj, mlp_proj there)",
    34: "32 + the CUTLASS GEMM at 33 to 64 rows",
    35: "34 + the attention a dependent launch there",
    36: "35 + attn_proj, mlp_proj split in K parts of ~384",
    37: "35 + the same, parts of ~768",
    38: "35 + the same, parts of ~1,024",
    39: "35 + the same, parts of ~1,536",
    40: "37 + the CUDA attention of bulk copies",
    41: "37 + the CUDA attention, 1 tile in flight",
    42: "37 + the CUDA attention, 2 tiles in flight",
    43: "37 + the CUDA attention, 3 tiles in flight",
    44: "40 + the CUTLASS GEMM up to 128 rows",
    45: "40 + the CUTLASS GEMM up to 256 rows",
    46: "40 + the CUTLASS GEMM up to 512 rows",
    47: "45, wider models up to 256 rows too",
    48: "45 without the K split",
    49: "45 + two halves on two streams from 256 rows",
    50: "45 + two halves on two streams from 128 rows",
    51: "45 + two halves at 208-256 rows, wider up to 128",
    52: "51 + the argmax on 4 warps",
    53: "52 + attn_proj in 2 K parts",
    54: "52 + attn_proj in 3 K parts",
    55: "54 up to 64 rows (session 50)",
    56: "55 + the CUTLASS GEMM up to 512 rows",
    57: "56, on 4 stages above 256 rows",
    58: "55 + two halves up to 512 rows",
    59: "58, parts of 129+ rows on 4 stages",
    60: "56, on 4 stages from 129 rows",
    61: "58, parts of 65+ rows on 4 stages",
    62: "59 without the K split",
    63: "59, the attention's 2 tiles in flight",
    64: "58, parts of 193+ rows on 4 stages",
    65: "56, on 4 stages from 193 rows",
    66: "60 + two halves above 256 rows",
    67: "65 from 256 rows + two halves at 512 (session 54)",
    68: "67, cuBLAS at 272, 288, 464, 480 (session 55)",
    69: "68 + the add + LayerNorm released early (session 56)",
    70: "69 + the argmax's tokens into pinned host memory (session 59)",
    71: "70 + the argmax folded into the one-row lm_head GEMV (engine now)",
}
