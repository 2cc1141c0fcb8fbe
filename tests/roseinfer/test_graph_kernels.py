"""The captured step's kernel choices (`roseinfer.graph_kernels.GraphKernels`): which buckets take PDL, the
CUTLASS GEMM and its shallow form, two halves on two streams, and what a step takes where the GEMM is off or the
model is split across ranks. Rules only, no GPU: the steps they choose are tests/roseinfer/test_cuda_graphs.py's."""

import dataclasses

from roseinfer.cuda_graphs import batch_buckets


def test_pdl_reaches_the_cutlass_buckets_and_48_and_64_for_narrow_models():
    # GraphKernels: which buckets' steps launch their Triton kernels as dependents (the engine's defaults, and the
    # designs before them as bench_graph_step.py rebuilds them).
    from roseinfer.graph_kernels import PDL_NARROW_WIDTH, GraphKernels

    buckets = batch_buckets(320)  # 1, 2, 4, 8, 16, ..., 304, 320
    gpt2, medium = PDL_NARROW_WIDTH, 1024
    on = GraphKernels()
    # the CUTLASS GEMM's buckets: 48 to 512 rows (up to 320 here) less 272 and 288, which run cuBLAS
    cutlass = [b for b in range(48, 321, 16) if b not in (272, 288)]
    assert [b for b in buckets if on.pdl_in(b, gpt2)] == [1, 2, 4, 8, 16, 32, *cutlass]
    # wider: the GEMV's, the skinny GEMM's and the CUTLASS GEMM's buckets, the last only up to 128 rows (beyond
    # it gpt2-medium's step was slower: session 48), and up to 64 before then
    assert [b for b in buckets if on.pdl_in(b, medium)] == [1, 2, 4, 8, 16, 32, 48, 64, 80, 96, 112, 128]
    before48 = GraphKernels(cutlass_wide_max_batch=64)
    assert [b for b in buckets if before48.pdl_in(b, medium)] == [1, 2, 4, 8, 16, 32, 48, 64]
    wide = GraphKernels(cutlass_wide_max_batch=256)  # the measurement hook for wider models
    assert [b for b in buckets if wide.pdl_in(b, medium)] == [1, 2, 4, 8, 16, 32, *range(48, 257, 16)]
    upto64 = GraphKernels(cutlass_gemm_max_batch=64)  # before session 47
    assert [b for b in buckets if upto64.pdl_in(b, gpt2)] == [1, 2, 4, 8, 16, 32, 48, 64]
    cublas = GraphKernels(cutlass_gemm_max_batch=0)  # before session 44: cuBLAS at 48 and 64 rows
    assert [b for b in buckets if cublas.pdl_in(b, medium)] == [1, 2, 4, 8, 16, 32]
    no_64 = GraphKernels(pdl_narrow_max_batch=0, cutlass_gemm_max_batch=0)  # before session 16
    assert [b for b in buckets if no_64.pdl_in(b, gpt2)] == [1, 2, 4, 8, 16, 32]
    assert not any(GraphKernels(pdl=False).pdl_in(b, gpt2) for b in buckets)
    # without the skinny GEMM buckets 16 and 32 run cuBLAS with plain launches, as before it
    no_skinny = GraphKernels(skinny_gemm_max_batch=0)
    assert [b for b in buckets if no_skinny.pdl_in(b, gpt2)] == [1, 2, 4, 8, *cutlass]
    assert [b for b in buckets if no_skinny.cutlass_in(b, gpt2)] == cutlass
    assert all(GraphKernels(pdl_max_batch=None).pdl_in(b, medium) for b in buckets)


def test_the_attention_releases_attn_proj_only_where_it_is_a_triton_kernel():
    # Buckets 48 to 512 run attn_proj on the CUTLASS GEMM (or cuBLAS): the attention is a dependent launch there
    # (which releases attn_proj as it starts) or, on cuBLAS, launched plainly; either way no early release rule
    # there, so the attention keeps its 16-token tiles (`pick_attention_tile(shares_sms=)`).
    from roseinfer.graph_kernels import GraphKernels

    buckets = batch_buckets(320)  # up to 320: past the CUTLASS buckets' 256
    assert [b for b in buckets if GraphKernels().attention_release_in(b)] == [1, 2, 4, 8, 16, 32]
    no_skinny = GraphKernels(skinny_gemm_max_batch=0)  # without the skinny GEMM: the GEMV's buckets only
    assert [b for b in buckets if no_skinny.attention_release_in(b)] == [1, 2, 4, 8]
    assert not any(GraphKernels(pdl_attention_release=False).attention_release_in(b) for b in buckets)


def test_two_halves_in_buckets_208_to_256_and_512_of_narrow_models_only():
    # GraphKernels.halves_in: from halves_from to halves_max_batch rows and from halves_wide_from to
    # halves_wide_max_batch, models at most 768 wide, and only where each half has more rows than the GEMV's and the
    # skinny GEMM's buckets (their split-K scratch is the step's one).
    from roseinfer.graph_kernels import PDL_NARROW_WIDTH, GraphKernels

    buckets, gpt2 = batch_buckets(1024), PDL_NARROW_WIDTH
    assert [b for b in buckets if GraphKernels().halves_in(b, gpt2)] == [208, 224, 240, 256, 512]
    assert not any(GraphKernels().halves_in(b, 1024) for b in buckets)  # gpt2-medium: not measured
    one_stream = GraphKernels(halves_from=0, halves_max_batch=0, halves_wide_from=0)
    assert not any(one_stream.halves_in(b, gpt2) for b in buckets)
    wide_only = GraphKernels(halves_from=0, halves_wide_from=300, halves_wide_max_batch=400)
    assert [b for b in buckets if wide_only.halves_in(b, gpt2)] == [b for b in buckets if 300 <= b <= 400]
    everywhere = GraphKernels(halves_from=16, halves_max_batch=1024)
    assert [b for b in buckets if everywhere.halves_in(b, gpt2)] == [b for b in buckets if b >= 80]
    assert dataclasses.replace(everywhere, skinny_gemm_max_batch=0).halves_in(32, gpt2)


def test_the_engine_without_the_cutlass_gemm_runs_its_steps_on_one_stream():
    # The halves make up for the CUTLASS tiles' waves: `--no-cutlass-gemm` turns them off too.
    from roseinfer.config import EngineConfig
    from roseinfer.graph_kernels import GraphKernels

    on = GraphKernels.of(EngineConfig())
    assert (on.halves_from, on.halves_wide_from, on.cutlass_gemm_max_batch) == (208, 512, 512)
    off = GraphKernels.of(EngineConfig(cutlass_gemm=False))
    assert off.cutlass_gemm_max_batch == 0 and not any(off.halves_in(b, 768) for b in batch_buckets(1024))


def test_a_step_takes_the_kernel_choices_it_can_run():
    # GraphKernels.for_step: without the CUTLASS GEMM cuBLAS on one stream; under tensor parallelism the GEMM up to
    # 256 rows on its deep form and the add + LayerNorm as before `layer_norm_early` (what was measured there), the
    # rest as asked
    from roseinfer.graph_kernels import GraphKernels

    k = GraphKernels()
    assert k.for_step(True, tensor_parallel=False) == k
    off = k.for_step(False, tensor_parallel=False)
    assert (off.cutlass_gemm_max_batch, off.halves_from, off.halves_wide_from) == (0, 0, 0)
    assert off.cutlass_shallow_from == k.cutlass_shallow_from  # (unread without the GEMM)
    tp = k.for_step(True, tensor_parallel=True)
    assert (tp.cutlass_gemm_max_batch, tp.cutlass_shallow_from, tp.layer_norm_early) == (256, 0, False)
    assert (
        dataclasses.replace(tp, cutlass_gemm_max_batch=512, cutlass_shallow_from=256, layer_norm_early=True)
        == k
    )
    assert (
        GraphKernels(cutlass_gemm_max_batch=64).for_step(True, tensor_parallel=True).cutlass_gemm_max_batch
        == 64
    )
    both = k.for_step(False, tensor_parallel=True)
    assert (both.cutlass_gemm_max_batch, both.halves_wide_from, both.cutlass_shallow_from) == (0, 0, 0)


def test_the_cutlass_gemm_runs_its_shallow_pipeline_in_step_parts_of_256_rows_and_more():
    # GraphKernels.cutlass_shallow_from: what `DecodeGraphs._kernel_choices` hands the linears for a part of the
    # step (a bucket on one stream, or a half): batch 512's halves of 256 and the one-stream buckets 272 to 496
    # run the shallow GEMM; the halves of 104 to 128 rows and the one-stream buckets up to 255 the deep one
    from roseinfer.cuda_graphs import DecodeGraphs
    from roseinfer.graph_kernels import GraphKernels
    from roseinfer.linears import _CUTLASS_ROWS, _CUTLASS_SHALLOW

    class Probe:  # what `_kernel_choices` reads of a DecodeGraphs
        kernels = GraphKernels()
        model = type("M", (), {"cfg": type("C", (), {"n_embd": 768})()})()
        skinny_scratch = mlp_scratch = attn_scratch = lm_head_argmax = None

    seen = {}
    for rows in (64, 128, 192, 255, 256, 304, 496):
        with DecodeGraphs._kernel_choices(Probe(), rows):
            seen[rows] = (_CUTLASS_ROWS.get(), _CUTLASS_SHALLOW.get())
    assert seen == {
        64: ((32, 512), False),
        128: ((32, 512), False),
        192: ((32, 512), False),
        255: ((32, 512), False),
        256: ((32, 512), True),
        304: ((32, 512), True),
        496: ((32, 512), True),
    }
    assert _CUTLASS_SHALLOW.get() is False  # reset after the block


def test_the_one_stream_buckets_measured_faster_on_cublas_run_it_with_plain_launches():
    # GraphKernels.cutlass_cublas_rows: buckets 272, 288, 464 and 480 of GPT-2 small ran faster on cuBLAS than on
    # the shallow CUTLASS GEMM (docs/BENCHMARKS.md, session 55); there the step is the one before the GEMM's
    # buckets reached them: no CUTLASS launch, no PDL, one stream. Batch 512's halves of 256 rows keep the GEMM.
    from roseinfer.graph_kernels import PDL_NARROW_WIDTH, GraphKernels

    k, gpt2 = GraphKernels(), PDL_NARROW_WIDTH
    above256 = [b for b in batch_buckets(512) if b > 256]
    assert [b for b in above256 if not k.cutlass_in(b, gpt2)] == [272, 288, 464, 480]
    assert [b for b in above256 if not k.pdl_in(b, gpt2)] == [272, 288, 464, 480]
    assert [b for b in above256 if k.halves_in(b, gpt2)] == [512]
    assert k.cutlass_in(512 // 2, gpt2)
    before = dataclasses.replace(k, cutlass_cublas_rows=frozenset())  # session 54's engine: all of them
    assert all(before.cutlass_in(b, gpt2) for b in above256)
    # without them the step's choices there are those of the engine whose CUTLASS buckets stopped at 256
    upto256 = dataclasses.replace(before, cutlass_gemm_max_batch=256)
    for b in (272, 288, 464, 480):
        assert (k.cutlass_in(b, gpt2), k.pdl_in(b, gpt2), k.halves_in(b, gpt2)) == (
            upto256.cutlass_in(b, gpt2),
            upto256.pdl_in(b, gpt2),
            upto256.halves_in(b, gpt2),
        )


def test_the_add_layer_norm_releases_the_gemm_early_in_gpt2_smalls_cutlass_buckets(monkeypatch):
    # GraphKernels.layer_norm_early: in the CUTLASS GEMM's buckets of models up to 768 wide (GPT-2 small's 64 and
    # 512 rows measured faster, gpt2-medium's 64 not: docs/BENCHMARKS.md, session 56) the step's add + LayerNorm
    # kernels are told so by `DecodeGraphs._kernel_choices` (on a device with PDL: pretended here)
    from roseinfer.cuda_graphs import DecodeGraphs
    from roseinfer.graph_kernels import PDL_NARROW_WIDTH, GraphKernels
    from roseinfer.kernels import pdl

    k, gpt2, medium = GraphKernels(), PDL_NARROW_WIDTH, 1024
    buckets = batch_buckets(512)
    cutlass = [b for b in buckets if k.cutlass_in(b, gpt2)]
    assert cutlass[0] == 48 and cutlass[-1] == 512 and 272 not in cutlass
    assert [b for b in buckets if k.layer_norm_early_in(b, gpt2)] == cutlass
    assert not any(k.layer_norm_early_in(b, medium) for b in buckets)  # there: the same, or slower
    assert not any(GraphKernels(layer_norm_early=False).layer_norm_early_in(b, gpt2) for b in buckets)
    assert not any(GraphKernels(pdl=False).layer_norm_early_in(b, gpt2) for b in buckets)
    assert not any(k.for_step(False, tensor_parallel=False).layer_norm_early_in(b, gpt2) for b in buckets)
    tp = k.for_step(True, tensor_parallel=True)  # measured on one device only
    assert any(tp.cutlass_in(b, gpt2) for b in buckets)
    assert not any(tp.layer_norm_early_in(b, gpt2) for b in buckets)

    monkeypatch.setattr(pdl, "_SUPPORTED", True)

    def early_in(kernels, width):
        class Probe:  # what `_kernel_choices` reads of a DecodeGraphs
            model = type("M", (), {"cfg": type("C", (), {"n_embd": width})()})()
            skinny_scratch = mlp_scratch = attn_scratch = lm_head_argmax = None

        Probe.kernels = kernels
        seen = []
        for rows in (8, 32, 48, 64, 272, 512):
            with DecodeGraphs._kernel_choices(Probe(), rows):
                assert pdl.pdl_enabled() == kernels.pdl_in(rows, width)
                seen.append(pdl.pdl_layer_norm_early())
        assert pdl.pdl_layer_norm_early() is False  # reset after the block
        return seen

    assert early_in(k, gpt2) == [False, False, True, True, False, True]
    assert early_in(k, medium) == [False] * 6
    assert early_in(GraphKernels(layer_norm_early=False), gpt2) == [False] * 6
