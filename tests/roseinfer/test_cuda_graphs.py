"""CUDA-graph decode (`--cuda-graph`): buckets, greedy equality with Hugging Face, replay equal to eager."""

import dataclasses

import pytest
import torch

from roseinfer import LLM, SamplingParams
from roseinfer.cuda_graphs import batch_buckets
from tests.roseinfer.test_engine_matches_hf import NEW_TOKENS, make_prompts


def test_batch_buckets_cover_every_batch_size():
    assert batch_buckets(1) == [1]
    assert batch_buckets(8) == [1, 2, 4, 8]
    assert batch_buckets(40) == [1, 2, 4, 8, 16, 32, 40]
    assert batch_buckets(64) == [1, 2, 4, 8, 16, 32, 48, 64]
    for max_batch in (1, 3, 17, 64, 100, 256):
        buckets = batch_buckets(max_batch)
        assert buckets == sorted(set(buckets)) and buckets[-1] == max_batch


def test_the_engine_captures_its_steps_with_every_kernel_on(tiny_checkpoint):
    # EngineConfig has no kernel switches: the runner's static step takes GraphKernels' defaults (eager on CPU).
    from roseinfer.graph_kernels import GraphKernels

    llm = LLM(tiny_checkpoint, device="cpu", max_batch_size=4)
    llm.engine.runner.use_static_decode(capture=False)
    # but the CUTLASS GEMM's rows, dropped where it cannot run (here: no CUDA)
    assert llm.engine.runner.graphs.kernels == dataclasses.replace(
        GraphKernels(), cutlass_gemm_max_batch=0, halves_from=0, halves_wide_from=0
    )
    assert GraphKernels().pdl_narrow_max_batch == 64 and GraphKernels().skinny_gemm_max_batch == 32


def test_where_the_cutlass_gemm_cannot_run_no_bucket_runs_as_halves(tiny_checkpoint):
    # without the CUTLASS GEMM (here: no CUDA) bucket 512 is one stream too: its halves need the shallow GEMM
    llm = LLM(tiny_checkpoint, device="cpu", max_batch_size=512)
    llm.engine.runner.use_static_decode(capture=False)
    graphs = llm.engine.runner.graphs
    assert 512 in graphs.buckets and graphs.halves is None
    assert not any(graphs.kernels.halves_in(b, 768) for b in graphs.buckets)


def test_a_step_as_two_halves_gives_the_one_pass_tokens(tiny_checkpoint, monkeypatch):
    # A bucket's step as two halves of its batch (`roseinfer.two_halves`; on CPU one after the other, eagerly):
    # the same tokens as one pass, each half advancing its own rows' inputs from step to step.
    from roseinfer.graph_kernels import GraphKernels
    from roseinfer.two_halves import TwoHalves

    ran = []
    run = TwoHalves.run
    monkeypatch.setattr(
        TwoHalves, "run", lambda self, bucket, *a: ran.append(bucket) or run(self, bucket, *a)
    )
    prompts = [p for p in make_prompts() for _ in range(20)][:80]
    outs = []
    one = GraphKernels(
        cutlass_gemm_max_batch=0, halves_from=0, halves_wide_from=0
    )  # (as the engine without CUDA)
    for kernels in (one, dataclasses.replace(one, halves_from=80)):
        llm = LLM(tiny_checkpoint, device="cpu", max_batch_size=80)
        llm.engine.runner.use_static_decode(capture=False, kernels=kernels)
        outs.append(
            [o.token_ids for o in llm.generate(prompts, SamplingParams(max_new_tokens=6, ignore_eos=True))]
        )
    assert ran and set(ran) == {80}  # the second engine's decode steps (bucket 80), none of the first's
    assert [len(t) for t in outs[1]] == [6] * 80
    assert outs[0] == outs[1]


def _generate(llm, **kw):
    params = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True, **kw)
    return [o.token_ids for o in llm.generate(make_prompts(), params)]


@pytest.mark.gpu
@pytest.mark.parametrize("paged_attn", [False, True])
@pytest.mark.parametrize(
    "min_batch", ["", "128"]
)  # Triton KV append inside the graph (default), the torch one
def test_graph_decode_fp32_matches_hf(monkeypatch, tiny_checkpoint, paged_attn, min_batch):
    from tests.roseinfer.test_engine_cuda import hf_outputs

    monkeypatch.setenv("ROSELLM_TRITON_KV_APPEND_MIN_BATCH", min_batch)
    torch.backends.cuda.matmul.allow_tf32 = False
    ref = hf_outputs(tiny_checkpoint, torch.float32)
    llm = LLM(
        tiny_checkpoint,
        device="cuda",
        prefill_max_batch_size=1,
        max_batch_size=6,
        cuda_graph=True,
        paged_attn=paged_attn,
    )
    assert llm.engine.kv_cache.triton_min_batch_graph == (128 if min_batch else 1)
    graphs = llm.engine.graphs
    assert sorted(graphs.graphs) == graphs.buckets == [1, 2, 4, 6]
    assert _generate(llm) == ref
    stats = llm.engine.stats
    assert stats["rollovers"] > 0 and stats["cow"] >= 1
    assert llm.engine.mgr.num_free() == llm.engine.mgr.num_blocks
    assert llm.engine.runner.in_flight is None


@pytest.mark.gpu
def test_graph_decode_stops_at_eos_with_a_step_in_flight(tiny_checkpoint):
    # Greedy fp16 graphs, overlapped: a sequence that meets EOS finishes there although the next step (already
    # launched) computed one more token for it; its tokens are the free run's cut at that EOS.
    import dataclasses

    # No prefix cache: the second run would find the first's prompt blocks cached and attend to them read back
    # (another attention path, other fp16 roundings), so its tokens could differ from the free run's for that
    # reason alone.
    llm = LLM(
        tiny_checkpoint, device="cuda", dtype="float16", max_batch_size=8, cuda_graph=True, paged_attn=True,
        prefix_cache=False,
    )  # fmt: skip
    free_run = _generate(llm)
    eos = next(t for t in free_run[0][5:] if 2 <= sum(t in o[1:] for o in free_run) < len(free_run))
    llm.engine.model_cfg = dataclasses.replace(llm.engine.model_cfg, eos_token_id=eos)
    outs = [o.token_ids for o in llm.generate(make_prompts(), SamplingParams(max_new_tokens=NEW_TOKENS))]
    assert llm.engine.mgr.num_free() == llm.engine.mgr.num_blocks
    expected = [o[: o.index(eos) + 1] if eos in o else o for o in free_run]
    assert any(len(e) < NEW_TOKENS for e in expected)
    assert outs == expected


@pytest.mark.gpu
def test_graph_replay_equals_the_same_path_run_eagerly(tiny_checkpoint):
    # fp16, batches padded to buckets, some sampled with a temperature: a replay must give exactly the eager result.
    graph = LLM(
        tiny_checkpoint, device="cuda", dtype="float16", max_batch_size=8, cuda_graph=True, paged_attn=True
    )
    eager = LLM(tiny_checkpoint, device="cuda", dtype="float16", max_batch_size=8, paged_attn=True)
    eager.engine.use_static_decode(capture=False)
    assert _generate(graph) == _generate(eager)
    assert _generate(graph, temperature=0.8) == _generate(eager, temperature=0.8)


@pytest.mark.gpu
def test_graph_decode_under_preemption(tiny_checkpoint):
    from tests.roseinfer.test_engine_cuda import hf_outputs

    torch.backends.cuda.matmul.allow_tf32 = False
    ref = hf_outputs(tiny_checkpoint, torch.float32)
    llm = LLM(
        tiny_checkpoint, device="cuda", num_blocks=14, max_batch_size=8, cuda_graph=True, paged_attn=True
    )
    assert _generate(llm) == ref
    assert llm.engine.stats["preemptions"] > 0


@pytest.mark.gpu
def test_graph_decode_with_blocks_reserved_ahead_equals_the_eager_path(tiny_checkpoint):
    # fp16, rollover blocks reserved ahead in captured, overlapped steps against the eager step (every block
    # allocated in the step that starts it): the same rollovers and copy-on-writes, and every block back in the
    # pool. Equal prompts besides make_prompts' mixed ones roll over in the same steps.
    stats = {}
    for graph in (True, False):
        llm = LLM(
            tiny_checkpoint,
            device="cuda",
            dtype="float16",
            max_batch_size=8,
            cuda_graph=graph,
            paged_attn=True,
        )
        params = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)
        outs = [o.token_ids for o in llm.generate(make_prompts() + [[7]] * 4, params)]
        assert [len(o) for o in outs] == [NEW_TOKENS] * len(outs)
        stats[graph] = {k: llm.engine.stats[k] for k in ("rollovers", "cow", "decode_steps")}
        assert llm.engine.mgr.num_free() == llm.engine.mgr.num_blocks
    assert stats[True] == stats[False] and stats[True]["rollovers"] > 0


@pytest.mark.gpu
def test_graph_decode_same_tokens_and_logits_whatever_each_kernel_releases_the_next(tiny_checkpoint):
    # fp16, batches 1 to 8: one-row GEMVs that release the next kernel as they start (the default) or after their
    # wait, the argmax writing the next step's inputs itself or a copy and an add after it, and the first c_attn
    # GEMV gathering the embeddings itself or two embedding kernels before it, compute the same numbers: identical
    # tokens, in a batch and one request at a time, and identical logits of a replay.
    from roseinfer.graph_kernels import GraphKernels

    earlier = GraphKernels(pdl_early_release=False, argmax_advances=False, embedding_gather=False)
    (outs, logits), (outs_earlier, logits_earlier) = (
        _fp16_graph_run(tiny_checkpoint, k) for k in (None, earlier)
    )
    assert outs == outs_earlier
    assert torch.equal(logits, logits_earlier)


@pytest.mark.gpu
def test_graph_decode_bucket_64_same_tokens_and_logits_with_pdl_or_plain_launches(tiny_checkpoint):
    # fp16, a batch of 60 (bucket 64, cuBLAS's linears: `--no-cutlass-gemm`): the add + LayerNorm kernels launched
    # as dependents (the default for a model this narrow) or plainly (as before session 16) compute the same numbers.
    from roseinfer.graph_kernels import GraphKernels
    from roseinfer.kernels.pdl import pdl_supported

    if not pdl_supported():
        pytest.skip("PDL needs Hopper or later")

    prompts = [p for p in make_prompts() for _ in range(10)][:60]
    runs = []
    cublas = GraphKernels(cutlass_gemm_max_batch=0)
    for kernels in (cublas, dataclasses.replace(cublas, pdl_narrow_max_batch=0)):
        opts = dict(device="cuda", dtype="float16", max_batch_size=64, cuda_graph=True, paged_attn=True)
        llm = LLM(tiny_checkpoint, **opts)
        llm.engine.use_static_decode(capture=True, kernels=kernels)
        assert llm.engine.graphs.kernels.pdl_in(64, 64) is (kernels is cublas)
        outs = llm.generate(prompts, SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True))
        runs.append(([o.token_ids for o in outs], llm.engine.graphs.outputs[64][0].clone()))
    (outs, logits), (outs_plain, logits_plain) = runs
    assert [len(t) for t in outs] == [NEW_TOKENS] * 60
    assert outs == outs_plain
    assert torch.equal(logits, logits_plain)


@pytest.mark.gpu
def test_graph_decode_as_two_halves_on_two_streams_agrees_with_one(tiny_checkpoint):
    # fp16, a batch of 224 captured as two halves of 112 rows on two streams (the engine's bucket 224) and on one
    # stream: the same tokens, and logits as close as a bucket of 112's kernels are to 224's.
    from roseinfer import cuda_ext
    from roseinfer.cuda_ext import cutlass_gemm
    from roseinfer.graph_kernels import GraphKernels

    if cutlass_gemm.module() is None:  # (the halves run only with it: without, the step is one stream)
        pytest.skip(cuda_ext.why_not_built(cutlass_gemm.NAME))

    prompts = [p for p in make_prompts() for _ in range(40)][:224]
    runs = []
    for kernels in (GraphKernels(halves_from=0), GraphKernels()):
        opts = dict(device="cuda", dtype="float16", max_batch_size=224, cuda_graph=True, paged_attn=True)
        llm = LLM(tiny_checkpoint, **opts)
        llm.engine.use_static_decode(capture=True, kernels=kernels)
        assert (llm.engine.graphs.halves is not None) is (kernels.halves_from > 0)
        outs = llm.generate(prompts, SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True))
        runs.append(([o.token_ids for o in outs], llm.engine.graphs.outputs[224][0].float()))
    (outs, logits), (outs_halves, logits_halves) = runs
    assert [len(t) for t in outs] == [NEW_TOKENS] * 224
    assert outs == outs_halves
    assert logits_halves.shape == logits.shape
    assert (logits_halves - logits).abs().max() <= 0.02 * logits.abs().max()


def _fp16_graph_run(checkpoint, kernels):
    """An fp16 engine with CUDA graphs (the captured step's kernel choices `kernels`, None: the engine's): the tokens
    of a batch and of three requests one at a time, and the last batch-1 replay's logits."""
    llm = LLM(checkpoint, device="cuda", dtype="float16", max_batch_size=8, cuda_graph=True, paged_attn=True)
    if kernels is not None:
        llm.engine.use_static_decode(capture=True, kernels=kernels)
    outs = (_generate(llm), [_generate_one(llm, p) for p in make_prompts()[:3]])
    return outs, llm.engine.graphs.outputs[1][0].clone()


def _generate_one(llm, prompt):
    params = SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True)
    return llm.generate([prompt], params)[0].token_ids


@pytest.mark.gpu
def test_graph_decode_reads_the_tokens_the_argmax_wrote_to_host_as_those_copied_out(tiny_checkpoint):
    # fp16, overlapped: a batch of 8 (bucket 8), three requests one at a time (bucket 1: row 0 alone runs their
    # 3 x 149 steps, so its parity differs from the other rows'), the batch of 8 again, the tokens read from the
    # pinned memory the argmax writes (the default) against those copied out after each replay, as before: the same
    # tokens and logits, and the host's parities still the device's at the end.
    from roseinfer.graph_kernels import GraphKernels

    runs = []
    for kernels in (None, GraphKernels(argmax_to_host=False)):
        opts = dict(device="cuda", dtype="float16", max_batch_size=8, cuda_graph=True, paged_attn=True)
        llm = LLM(tiny_checkpoint, **opts)
        if kernels is not None:
            llm.engine.use_static_decode(capture=True, kernels=kernels)
        host = llm.engine.graphs.host_tokens
        assert (host is None) is (kernels is not None)
        outs = (_generate(llm), [_generate_one(llm, p) for p in make_prompts()[:3]], _generate(llm))
        runs.append((outs, llm.engine.graphs.outputs[8][0].clone()))
        if host is not None:
            torch.cuda.synchronize()
            assert host.parity.tolist() == host._parity.tolist()
            assert host._parity[0] != host._parity[1]  # row 0 ran the single requests' steps too
    (outs, logits), (outs_copied, logits_copied) = runs
    assert outs == outs_copied and all(len(t) == NEW_TOKENS for t in outs[1])
    assert torch.equal(logits, logits_copied)


@pytest.mark.gpu
def test_graph_decode_lm_head_gemv_agrees_with_cublas(tiny_checkpoint):
    # fp16, batches 1 to 8: at one row ln_f + lm_head as one GEMV (the default) or ln_f's kernel and cuBLAS compute
    # the same logits up to the order of each fp32 sum: the same tokens, the last batch-1 replay's logits within
    # fp16 rounding.
    from roseinfer.graph_kernels import GraphKernels

    cublas = GraphKernels(lm_head_gemv=False)
    (outs, logits), (outs_cublas, logits_cublas) = (
        _fp16_graph_run(tiny_checkpoint, k) for k in (None, cublas)
    )
    assert outs == outs_cublas
    torch.testing.assert_close(logits.float(), logits_cublas.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
def test_graph_decode_argmax_folded_into_the_lm_head_gemv_agrees_with_the_argmax_kernels(
    tiny_checkpoint, monkeypatch
):
    # fp16: at one row the lm_head GEMV folds the greedy token into its words and one small kernel reads them (the
    # default), or the argmax's two kernels read the logits it wrote: the same GEMV, so the same tokens and the
    # same logits bit for bit. Each engine's steps are captured again, counting the captures' reads of the words:
    # the default's bucket-1 step took the folded path, the other none.
    from roseinfer.graph_kernels import GraphKernels
    from roseinfer.kernels import argmax

    reads = []
    real = argmax.argmax_words
    monkeypatch.setattr(argmax, "argmax_words", lambda *a, **kw: reads.append(1) or real(*a, **kw))
    runs = []
    for kernels in (GraphKernels(), GraphKernels(lm_head_argmax=False)):
        llm = LLM(
            tiny_checkpoint,
            device="cuda",
            dtype="float16",
            max_batch_size=8,
            cuda_graph=True,
            paged_attn=True,
        )
        reads.clear()
        llm.engine.use_static_decode(capture=True, kernels=kernels)
        assert bool(reads) is kernels.lm_head_argmax  # bucket 1's warm-up and capture
        outs = (_generate(llm), [_generate_one(llm, p) for p in make_prompts()[:3]])
        runs.append((outs, llm.engine.graphs.outputs[1][0].clone()))
    (outs, logits), (outs_kernels, logits_kernels) = runs
    assert outs == outs_kernels and all(len(t) == NEW_TOKENS for t in outs[1])
    assert torch.equal(logits, logits_kernels)


@pytest.mark.gpu
def test_graph_decode_skinny_gemm_agrees_with_cublas(tiny_checkpoint):
    # fp16, a batch of 24 (bucket 32): the linears of buckets 4 to 64 that the GEMV does not take as the skinny
    # GEMM (the default, PDL in its buckets) or on cuBLAS compute the same numbers up to the order of each fp32
    # sum. A token stream of a random model can flip at a near-tie and then differ everywhere, so the comparison
    # is one replay of bucket 32 on the same inputs and cache, captured both ways on one engine.
    from roseinfer.graph_kernels import GraphKernels

    llm = LLM(
        tiny_checkpoint, device="cuda", dtype="float16", max_batch_size=32, cuda_graph=True, paged_attn=True
    )
    prompts = [p for p in make_prompts() for _ in range(3)][:24]
    outs = llm.generate(prompts, SamplingParams(max_new_tokens=NEW_TOKENS, ignore_eos=True))
    assert [len(o.token_ids) for o in outs] == [NEW_TOKENS] * 24
    engine = llm.engine
    assert engine.graphs.skinny_scratch.used  # the batch's steps ran it
    logits = {}
    for name, kernels in (("skinny", None), ("cublas", GraphKernels(skinny_gemm_max_batch=0))):
        if kernels is not None:
            engine.use_static_decode(capture=True, kernels=kernels)
        n_layer, m = engine.model_cfg.n_layer, engine.runner.max_blocks_per_seq
        # every row: token 1 at past 20 over the blocks the batch left in the cache (block b for row b)
        tables = torch.arange(32).view(32, 1, 1).expand(32, n_layer, m)
        engine.runner.freeze_static_inputs(32, past=20, tables=tables)
        engine.graphs.replay(32)
        logits[name] = engine.graphs.outputs[32][0].float().clone()  # [32, V]
    assert not engine.graphs.skinny_scratch.used  # the second capture ran cuBLAS
    torch.testing.assert_close(logits["skinny"], logits["cublas"], atol=2e-2, rtol=2e-2)
