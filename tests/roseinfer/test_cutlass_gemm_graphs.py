"""The captured decode step with the CUTLASS GEMM (`roseinfer.cuda_ext.cutlass_gemm`) against cuBLAS, on a GPU: its
buckets at 48 and 64 rows, beyond 64 (several token tiles, grids of more than one wave, two halves on two streams)
and at 512 rows on its shallow pipeline, one replay of each on the same inputs and cache. The GEMM alone is
tests/roseinfer/test_cutlass_gemm.py's."""

from __future__ import annotations

import pytest
import torch

from roseinfer import cuda_ext
from roseinfer.cuda_ext import cutlass_gemm as cg


def _small_engine(tmp_path, max_batch: int):
    """A GPU engine of a GPT-2-small-wide checkpoint (768 wide, 64-dim heads: the CUDA attention, mlp_proj in 4 K
    parts) with buckets up to `max_batch` rows; skips where the GEMM is not built."""
    from roseinfer import LLM
    from tests.helpers import save_checkpoint

    if cg.module() is None:
        pytest.skip(cuda_ext.why_not_built(cg.NAME))
    ckpt = save_checkpoint(tmp_path / "small", n_head=12, n_embd=768)
    return LLM(
        ckpt, device="cuda", dtype="float16", max_batch_size=max_batch, cuda_graph=True, paged_attn=True
    ).engine


def _replayed_logits(engine, kernels, buckets=(48, 64)) -> dict[int, torch.Tensor]:
    """Each bucket's logits [bucket, V] from one replay of the step captured with `kernels`, on the same inputs
    every time (past 20, a block of its own a row)."""
    engine.use_static_decode(capture=True, kernels=kernels)
    n_layer, m = engine.model_cfg.n_layer, engine.runner.max_blocks_per_seq
    logits = {}
    for bucket in buckets:
        tables = torch.arange(bucket).view(bucket, 1, 1).expand(bucket, n_layer, m)
        engine.runner.freeze_static_inputs(bucket, past=20, tables=tables)
        engine.graphs.replay(bucket)
        logits[bucket] = engine.graphs.outputs[bucket][0].float().clone()
    return logits


def _logits_with_and_without_cutlass(engine, buckets, halves=False):
    """`_replayed_logits` of `buckets` with the engine's kernels on one stream ("cutlass": the CUTLASS GEMM at each
    bucket's rows) and with cuBLAS in the CUTLASS buckets ("cublas"), and with halves=True the engine's own kernels
    too ("halves": its buckets of 208 to 256 rows as two halves), and every CUTLASS launch each capture made: (which,
    "gemm" or "parts", rows)."""
    from roseinfer.graph_kernels import GraphKernels

    calls = []
    real, real_parts = cg.cutlass_gemm, cg.cutlass_gemm_parts
    logits = {}
    runs = [
        ("cutlass", GraphKernels(halves_from=0, halves_wide_from=0)),
        ("cublas", GraphKernels(cutlass_gemm_max_batch=0, halves_from=0, halves_wide_from=0)),
    ]
    for name, kernels in runs + ([("halves", GraphKernels())] if halves else []):
        cg.cutlass_gemm = lambda *a, _name=name, **kw: (
            calls.append((_name, "gemm", a[0].shape[0])) or real(*a, **kw)
        )
        cg.cutlass_gemm_parts = lambda *a, _name=name, **kw: (
            calls.append((_name, "parts", a[0].shape[0])) or real_parts(*a, **kw)
        )
        try:
            logits[name] = _replayed_logits(engine, kernels, buckets=buckets)
        finally:
            cg.cutlass_gemm, cg.cutlass_gemm_parts = real, real_parts
    return logits, calls


@pytest.mark.gpu
def test_graph_decode_at_64_rows_agrees_with_cublas(tiny_checkpoint):
    # fp16, a batch of 40 (bucket 48) and of 64: the captured step with the CUTLASS GEMM (the default, PDL in its
    # buckets) and with cuBLAS (`--no-cutlass-gemm`) compute the same numbers up to the order of each fp32 sum:
    # one replay of each bucket on the same inputs and cache, captured both ways on one engine.
    from roseinfer import LLM, SamplingParams
    from roseinfer.graph_kernels import CUTLASS_MAX_BATCH
    from tests.roseinfer.test_engine_matches_hf import make_prompts

    if cg.module() is None:
        pytest.skip(cuda_ext.why_not_built(cg.NAME))
    llm = LLM(
        tiny_checkpoint, device="cuda", dtype="float16", max_batch_size=64, cuda_graph=True, paged_attn=True
    )
    prompts = [p for p in make_prompts() for _ in range(16)][:64]
    outs = llm.generate(prompts, SamplingParams(max_new_tokens=4, ignore_eos=True))
    assert [len(o.token_ids) for o in outs] == [4] * 64
    engine = llm.engine
    assert engine.graphs.kernels.cutlass_gemm_max_batch == CUTLASS_MAX_BATCH == 512
    logits, calls = _logits_with_and_without_cutlass(engine, (48, 64))
    whose = {c[0] for c in calls if c[1] == "gemm"}
    assert "cutlass" in whose and "cublas" not in whose
    for bucket in (48, 64):
        torch.testing.assert_close(logits["cutlass"][bucket], logits["cublas"][bucket], atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
def test_graph_decode_beyond_64_rows_agrees_with_cublas(tmp_path):
    # the engine's default buckets of 80, 128 and 256 rows (several token tiles, the last one partial at 80; at 256
    # c_fc's and the split mlp_proj's grids are more than one wave) on a GPT-2-small-wide checkpoint (768 wide, 64-dim
    # heads: the CUDA attention, and mlp_proj in 4 K parts that the add + LayerNorm sums) against cuBLAS in those
    # buckets, one replay each on the same inputs and cache; and bucket 256 as the engine runs it, two halves of 128
    # rows on two streams
    from roseinfer.graph_kernels import CUTLASS_MAX_BATCH

    engine = _small_engine(tmp_path, 256)
    assert engine.graphs.kernels.cutlass_gemm_max_batch == CUTLASS_MAX_BATCH == 512
    assert engine.graphs.kernels.halves_in(256, 768) and not engine.graphs.kernels.halves_in(128, 768)
    buckets = (80, 128, 256)
    logits, calls = _logits_with_and_without_cutlass(engine, buckets, halves=True)
    assert {("cutlass", kind, b) for kind in ("gemm", "parts") for b in buckets} <= set(calls)
    assert {("halves", kind, b) for kind in ("gemm", "parts") for b in (80, 128)} <= set(calls)
    # the capture makes every bucket's step; bucket 256 runs as two halves of 128 rows, so the launches of 128 rows
    # are bucket 128's and twice as many for bucket 256's halves
    rows = {name: [c[2] for c in calls if c[0] == name] for name in ("cutlass", "halves")}
    assert 256 in rows["cutlass"] and 256 not in rows["halves"]
    assert rows["halves"].count(128) == 3 * rows["cutlass"].count(128) > 0
    assert not [c for c in calls if c[0] == "cublas"]
    for bucket in buckets:
        ref = logits["cublas"][bucket]
        # logits of a few units: fp16 sums in another order differ by a few ulps
        scale = ref.abs().max().item()
        torch.testing.assert_close(logits["cutlass"][bucket], ref, atol=0.02 * scale, rtol=2e-2)
        torch.testing.assert_close(logits["halves"][bucket], ref, atol=0.02 * scale, rtol=2e-2)


@pytest.mark.gpu
def test_graph_decode_at_512_rows_on_the_shallow_pipeline_agrees_with_cublas(tmp_path):
    # bucket 512 with the CUTLASS GEMM on its shallow pipeline, on one stream and as two halves of 256 rows (the
    # engine's), against cuBLAS: one replay each on the same inputs and cache
    from roseinfer.graph_kernels import GraphKernels

    engine = _small_engine(tmp_path, 512)
    calls = []
    real, real_parts = cg.cutlass_gemm, cg.cutlass_gemm_parts
    logits = {}
    runs = {
        "cublas": GraphKernels(cutlass_gemm_max_batch=0, halves_from=0, halves_wide_from=0),
        "one": GraphKernels(halves_wide_from=0),
        "halves": GraphKernels(),
    }
    for name, kernels in runs.items():
        cg.cutlass_gemm = lambda *a, _n=name, **kw: (
            calls.append((_n, a[0].shape[0], kw["shallow"])) or real(*a, **kw)
        )
        cg.cutlass_gemm_parts = lambda *a, _n=name, **kw: (
            calls.append((_n, a[0].shape[0], kw["shallow"])) or real_parts(*a, **kw)
        )
        try:
            logits[name] = _replayed_logits(engine, kernels, buckets=(512,))[512]
        finally:
            cg.cutlass_gemm, cg.cutlass_gemm_parts = real, real_parts
    assert ("one", 512, True) in calls and ("halves", 256, True) in calls
    assert not [c for c in calls if c[0] == "cublas"]
    # every launch of a step part of 256 rows or more on the shallow pipeline, every smaller one on the deep
    assert all(shallow == (rows >= 256) for _, rows, shallow in calls)
    ref = logits["cublas"]
    scale = ref.abs().max().item()
    for name in ("one", "halves"):
        torch.testing.assert_close(logits[name], ref, atol=0.02 * scale, rtol=2e-2)
