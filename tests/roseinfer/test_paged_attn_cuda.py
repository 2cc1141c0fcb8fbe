"""The CUDA paged-attention decode kernel (`roseinfer.cuda_ext.paged_attn`, K/V tiles by bulk copy) against the torch
reference and the Triton kernel, on random (never zero) data; GPU tests, and on CPU what it refuses."""

import pytest
import torch

from roseinfer.cuda_ext import paged_attn

BLOCK = paged_attn.BLOCK
D = paged_attn.HEAD_DIM


def _operands(batch, pasts, heads=12, seed=0, index=torch.int64, extra_blocks=0):
    """(q, k_new, v_new, k_cache, v_cache, table, past) with every table row wide enough for its past and the new
    token; the cache's blocks handed out in shuffled order."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    width = -(-(max(pasts) + 1) // BLOCK) + extra_blocks
    n_blocks = batch * width + 3
    kc, vc = (
        torch.rand(n_blocks, heads, BLOCK, D, generator=g, device="cuda").half() + 0.1 for _ in range(2)
    )
    q, k_new, v_new = (torch.randn(batch, heads, D, generator=g, device="cuda").half() for _ in range(3))
    table = torch.randperm(n_blocks, generator=g, device="cuda")[: batch * width].view(batch, width).to(index)
    past = torch.tensor([pasts[i % len(pasts)] for i in range(batch)], device="cuda", dtype=index)
    return q, k_new, v_new, kc, vc, table, past


def _reference(q, k_new, v_new, kc, vc, table, past):
    from roseinfer.attention import paged_decode_attention

    return paged_decode_attention(
        q.float(), k_new.float(), v_new.float(), kc.float(), vc.float(), table.long(), past.long(), D**-0.5
    )


def _appended(kc, vc, k_new, v_new, table, past):
    from roseinfer.kernels.kv_append import kv_append_reference

    kc_ref, vc_ref = kc.clone(), vc.clone()
    rows = torch.arange(table.shape[0], device="cuda")
    kv_append_reference(kc_ref, vc_ref, k_new, v_new, table[rows, past.long() // BLOCK], past.long() % BLOCK)
    return kc_ref, vc_ref


def test_stages_follow_the_pairs_count():
    # two tiles in flight up to 3,071 pairs (GPT-2 small batch 255), one from 3,072 (batch 256)
    assert paged_attn.pick_stages(12) == paged_attn.pick_stages(768) == paged_attn.pick_stages(3071) == 2
    assert paged_attn.pick_stages(3072) == paged_attn.pick_stages(6144) == 1
    assert all(paged_attn.pick_stages(p) in paged_attn.STAGE_CHOICES for p in (1, 3072))


def test_nothing_fits_without_a_cuda_build():
    # On a CPU machine (the CI) the kernel is never built, and the engine's attention stays on the Triton kernel
    q = torch.zeros(2, 12, D, dtype=torch.float16)
    cache = torch.zeros(4, 12, BLOCK, D, dtype=torch.float16)
    table, past = torch.zeros(2, 2, dtype=torch.int64), torch.zeros(2, dtype=torch.int64)
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine: the GPU tests below cover it")
    assert not paged_attn.fits(q, q, q, cache, cache, table, past)


@pytest.mark.gpu
@pytest.mark.parametrize("stages", paged_attn.STAGE_CHOICES)
@pytest.mark.parametrize("index", [torch.int64, torch.int32])
def test_kernel_matches_reference_at_block_edges_and_appends(stages, index):
    # Pasts at and around block and warp-row edges (a warp takes 16 rows of a tile), 0 (the new token only), and
    # past 32 tiles (the table entries a lane holds are read again); the append writes each slot and nothing else.
    if paged_attn.load() is None:
        pytest.skip("the CUDA kernel is not built here")
    pasts = [0, 1, 15, 16, 17, 47, 48, 63, 64, 65, 127, 128, 129, 200, 511, 1000, 2048, 2100]
    q, k_new, v_new, kc, vc, table, past = _operands(len(pasts) * 3, pasts, seed=stages, index=index)
    assert paged_attn.fits(q, k_new, v_new, kc, vc, table, past)
    ref = _reference(q, k_new, v_new, kc, vc, table, past)
    kc_ref, vc_ref = _appended(kc, vc, k_new, v_new, table, past)
    out = paged_attn.paged_decode_attention_cuda(
        q, k_new, v_new, kc, vc, table, past, D**-0.5, append=True, stages=stages
    )
    torch.testing.assert_close(out.float(), ref, atol=2e-3, rtol=2e-3)
    assert torch.equal(kc, kc_ref) and torch.equal(vc, vc_ref)


@pytest.mark.gpu
def test_the_probe_build_matches_the_reference_with_its_wait_skipped_or_not(monkeypatch):
    # scripts/bench_graph_step.py --probe-attention-no-wait: the probe build's kernel is the engine's with its wait
    # for the kernel in front made conditional; launched with nothing in front (so the skip itself is not seen
    # here) it gives the reference's output with the switch on and off, and only the probe build has the switch.
    engine_build, probe = paged_attn.load(), paged_attn.load(probe_skip_wait=True)
    if engine_build is None or probe is None:
        pytest.skip("the CUDA kernel is not built here")
    assert not hasattr(engine_build, "set_probe_skip_wait")
    monkeypatch.setattr(paged_attn, "load", lambda probe_skip_wait=False: probe)
    q, k_new, v_new, kc, vc, table, past = _operands(8, [0, 63, 64, 300])
    ref = _reference(q, k_new, v_new, kc, vc, table, past)
    for skip in (True, False):
        probe.set_probe_skip_wait(skip)
        out = paged_attn.paged_decode_attention_cuda(q, k_new, v_new, kc, vc, table, past, D**-0.5, pdl=True)
        torch.cuda.synchronize()
        torch.testing.assert_close(out.float(), ref, atol=2e-3, rtol=2e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("batch", [1, 8, 64, 512])
def test_kernel_matches_triton_without_append(batch):
    # The same operands as the Triton one-pass kernel at its own tile; q, k and v as views of one [B, 3, H, D]
    # projection (the engine's c_attn output), the cache left as it was.
    from roseinfer.kernels.paged_attention import paged_decode_attention_triton, pick_attention_tile

    if paged_attn.load() is None:
        pytest.skip("the CUDA kernel is not built here")
    pasts = [3, 64, 100, 255, 256, 300]
    _, _, _, kc, vc, table, past = _operands(batch, pasts, seed=batch)
    qkv = torch.randn(batch, 3, 12, D, device="cuda").half()
    q, k_new, v_new = qkv.unbind(1)
    before = kc.clone(), vc.clone()
    out = paged_attn.paged_decode_attention_cuda(q, k_new, v_new, kc, vc, table, past, D**-0.5)
    tile = pick_attention_tile(batch * 12, BLOCK)
    want = paged_decode_attention_triton(q, k_new, v_new, kc, vc, table, past, D**-0.5, tile)
    torch.testing.assert_close(out, want, atol=2e-3, rtol=2e-3)
    torch.testing.assert_close(
        out.float(), _reference(q, k_new, v_new, kc, vc, table, past), atol=2e-3, rtol=2e-3
    )
    assert torch.equal(kc, before[0]) and torch.equal(vc, before[1])


@pytest.mark.gpu
@pytest.mark.parametrize("early", [False, True])
def test_kernel_after_the_gemv_that_writes_its_qkv_in_a_graph(early):
    # The engine's chain: a PDL GEMV writes q, k and v (with early release it lets this kernel start as it starts
    # itself); this kernel, a dependent launch, reads the past length, table and first tiles before its wait and
    # q, k, v after it, and writes the new token's slot; a PDL GEMV reads its output. Replayed on new inputs and
    # lengths, each output must match the reference on that replay's own q, k, v (a read of q, k or v moved above
    # the wait would see the previous replay's).
    from roseinfer.kernels.pdl import pdl_scope, pdl_supported
    from tests.roseinfer.test_split_attention_kernel import check_attention_between_gemvs_in_a_graph

    if paged_attn.load() is None or not pdl_supported():
        pytest.skip("the CUDA kernel (or PDL) is not here")
    g = torch.Generator(device="cuda").manual_seed(21)
    _, _, _, kc, vc, table, past = _operands(1, [16 * BLOCK - 1], seed=21)  # a table of 16 blocks
    check_attention_between_gemvs_in_a_graph(
        lambda q, k, v: paged_attn.paged_decode_attention_cuda(q, k, v, kc, vc, table, past, D**-0.5, append=True),
        lambda: pdl_scope(True, attention=True, early_release=early),
        kc, vc, table, past, g,
    )  # fmt: skip


@pytest.mark.gpu
def test_rows_past_the_length_and_unused_table_entries_never_reach_the_output():
    # NaN in every cache row at or beyond each sequence's length (the slot included: no append here) and table
    # entries past its tiles far outside the cache: the kernel reads neither (a 0 * NaN would show).
    if paged_attn.load() is None:
        pytest.skip("the CUDA kernel is not built here")
    pasts = [0, 1, 17, 63, 64, 100, 191]
    q, k_new, v_new, kc, vc, table, past = _operands(len(pasts), pasts, seed=3, extra_blocks=2)
    for row, length in enumerate(pasts):
        for i in range(table.shape[1]):
            first = max(0, length - i * BLOCK)  # this block's first row at or beyond the length
            if first < BLOCK:
                kc[table[row, i], :, first:] = float("nan")
                vc[table[row, i], :, first:] = float("nan")
    want = _reference(q, k_new, v_new, kc.nan_to_num(0.0), vc.nan_to_num(0.0), table, past)
    for row, length in enumerate(pasts):
        table[row, -(-length // BLOCK) :] = 1 << 40  # never dereferenced
    out = paged_attn.paged_decode_attention_cuda(q, k_new, v_new, kc, vc, table, past, D**-0.5)
    assert not out.isnan().any()
    torch.testing.assert_close(out.float(), want, atol=2e-3, rtol=2e-3)


@pytest.mark.gpu
def test_k_and_v_of_their_own_strides():
    # k_new and v_new laid out differently (v a transposed copy's view): each read through its own strides
    if paged_attn.load() is None:
        pytest.skip("the CUDA kernel is not built here")
    q, k_new, _, kc, vc, table, past = _operands(8, [5, 70, 130], seed=4)
    g = torch.Generator(device="cuda").manual_seed(5)
    v_new = (
        torch.randn(12, 8, D, generator=g, device="cuda").half().transpose(0, 1)
    )  # [B, H, D], strides (64, 512, 1)
    assert v_new.stride() != k_new.stride()
    assert paged_attn.fits(q, k_new, v_new, kc, vc, table, past)
    out = paged_attn.paged_decode_attention_cuda(q, k_new, v_new, kc, vc, table, past, D**-0.5)
    torch.testing.assert_close(
        out.float(), _reference(q, k_new, v_new, kc, vc, table, past), atol=2e-3, rtol=2e-3
    )


@pytest.mark.gpu
def test_kernel_refuses_what_it_was_not_built_for():
    if paged_attn.load() is None:
        pytest.skip("the CUDA kernel is not built here")
    q, k_new, v_new, kc, vc, table, past = _operands(4, [10])
    ok = (q, k_new, v_new, kc, vc, table, past)
    assert paged_attn.fits(*ok)
    wide = torch.zeros(kc.shape[0], 12, BLOCK, 80, dtype=torch.float16, device="cuda")
    buf = torch.zeros(4 * 12 * D + 4, dtype=torch.float16, device="cuda")
    misaligned = buf[4:].view(4, 12, D)  # rows 8 bytes off 16
    for bad in (
        (q.float(), k_new, v_new, kc, vc, table, past),
        (q, k_new, v_new, kc, vc, table, past.int()),  # lengths of another type than the table's
        (q, k_new, v_new, wide, wide, table, past),
        (q, k_new[:2], v_new, kc, vc, table, past),  # another batch
        (q, k_new, misaligned, kc, vc, table, past),
        (q, k_new, v_new, kc, vc, table.cpu(), past),  # another device
        (q, k_new, v_new, kc, vc, table, past.cpu()),
        (q, k_new, v_new, kc, vc, table[:2], past),
    ):
        assert not paged_attn.fits(*bad)
    with pytest.raises(ValueError, match="stages must be one of"):
        paged_attn.paged_decode_attention_cuda(*ok, 0.125, stages=5)
    # the launcher's own check, past the wrapper: its message holds a number, which as a formatted TORCH_CHECK
    # killed the process with a segfault on the H200 machine; it must raise (ROSEINFER_CHECK, common_check.cuh)
    with pytest.raises(RuntimeError, match="stages must be 1, 2 or 3, not 7"):
        paged_attn.load().paged_attn(*ok, torch.empty_like(q), 0.125, False, 7, False)


def test_both_decode_paths_launch_it_where_it_fits_and_the_switch_is_on(monkeypatch):
    # StaticDecodeKV (captured step, GraphKernels.cuda_paged_attention) and DecodeKV (eager, EngineConfig's
    # cuda_paged_attn) -> the CUDA launcher where `fits` says so and the switch is on, with the stages asked for;
    # else the Triton one-pass kernel (launchers recorded in place of the kernels: CPU tensors here)
    import roseinfer.kernels.paged_attention as pa
    from roseinfer.graph_kernels import GraphKernels
    from roseinfer.kv_context import DecodeKV, StaticDecodeKV

    launched = []
    monkeypatch.setattr(
        pa, "paged_decode_attention_triton", lambda *a, **k: launched.append("triton") or a[0]
    )
    monkeypatch.setattr(
        paged_attn,
        "paged_decode_attention_cuda",
        lambda *a, **k: launched.append(("cuda", k["stages"])) or a[0],
    )
    fits = [True]
    monkeypatch.setattr(paged_attn, "fits", lambda *a: fits[0])
    cache = type("Cache", (), {})()  # what the attention reads of a KVCache
    cache.k_caches = cache.v_caches = [torch.zeros(4, 12, BLOCK, D)]  # [N, H, BLOCK, D]
    cache.triton_min_batch = cache.triton_min_batch_graph = 1
    cache.use_triton = False
    q = torch.zeros(64, 12, D)  # 768 pairs: the one-pass kernel
    tables, past = torch.zeros(1, 64, 2, dtype=torch.int64), torch.zeros(64, dtype=torch.int64)
    assert GraphKernels().cuda_paged_attention and GraphKernels().cuda_attention_stages is None
    for on, stages, fit, want in (
        (True, None, True, ("cuda", None)),
        (True, 3, True, ("cuda", 3)),
        (True, None, False, "triton"),
        (False, None, True, "triton"),
    ):
        fits[0] = fit
        kernels = GraphKernels(cuda_paged_attention=on, cuda_attention_stages=stages)
        static = StaticDecodeKV(
            cache, tables, past, 1.0, paged_attn=True, cuda_attention=kernels.cuda_paged_attention,
            cuda_attention_stages=kernels.cuda_attention_stages,
        )  # fmt: skip
        static.attend(0, q, q, q)
        assert launched[-1] == want
        if stages is None:
            eager = DecodeKV(None, cache, [], tables, past, 1.0, False, True, cuda_attention=on)
            eager.attend(0, q, q, q)
            assert launched[-1] == want
    # few pairs: the split kernel, whatever the switch
    monkeypatch.setattr(
        "roseinfer.kernels.split_attention.split_decode_attention_triton",
        lambda *a, **k: launched.append("split") or a[0],
    )
    fits[0] = True
    StaticDecodeKV(cache, tables[:, :1], past[:1], 1.0, paged_attn=True, split_attention=True,
                   cuda_attention=True).attend(0, q[:1], q[:1], q[:1])  # fmt: skip
    assert launched[-1] == "split"


@pytest.mark.gpu
def test_engine_steps_and_tokens_agree_with_the_triton_attention(tmp_path):
    # A checkpoint of 64-dim heads (2 heads, 128 wide) in float16: the captured step of buckets 32 and 64 (64 and
    # 128 sequence x head pairs: the one-pass kernel) replayed on the same inputs with the CUDA attention and with
    # the Triton kernel, pasts of 100 tokens over two blocks a row; and the engine's greedy tokens both ways, in
    # captured steps and eagerly.
    from roseinfer import LLM, SamplingParams
    from roseinfer.graph_kernels import GraphKernels
    from tests.helpers import save_checkpoint
    from tests.roseinfer.test_engine_matches_hf import make_prompts

    if paged_attn.load() is None:
        pytest.skip("the CUDA kernel is not built here")
    ckpt = save_checkpoint(tmp_path / "hd64", n_head=2, n_embd=128)
    prompts = [p for p in make_prompts() for _ in range(8)][:40]  # 80 pairs
    params = SamplingParams(max_new_tokens=8, ignore_eos=True)
    tokens, engines = {}, {}
    real = paged_attn.paged_decode_attention_cuda
    for graph in (True, False):
        for on in (True, False):
            calls = []  # launches, captured or eager (a graph's capture may come with the engine)
            paged_attn.paged_decode_attention_cuda = lambda *a, _calls=calls, **k: (
                _calls.append(1) or real(*a, **k)
            )
            try:
                llm = LLM(ckpt, device="cuda", dtype="float16", max_batch_size=64, cuda_graph=graph,
                          paged_attn=True, cuda_paged_attn=on)  # fmt: skip
                tokens[graph, on] = [o.token_ids for o in llm.generate(prompts, params)]
            finally:
                paged_attn.paged_decode_attention_cuda = real
            assert bool(calls) == on
            engines[graph, on] = llm.engine
        assert tokens[graph, True] == tokens[graph, False]
    engine = engines[True, True]
    n_layer, m = engine.model_cfg.n_layer, engine.runner.max_blocks_per_seq
    logits = {}
    for on in (True, False):
        engine.use_static_decode(capture=True, kernels=GraphKernels(cuda_paged_attention=on))
        for bucket in (32, 64):
            blocks = torch.arange(2 * bucket).view(bucket, 1, 2)
            tables = torch.zeros(bucket, n_layer, m, dtype=torch.int64)
            tables[:, :, :2] = blocks
            engine.runner.freeze_static_inputs(bucket, past=100, tables=tables)
            engine.graphs.replay(bucket)
            logits[on, bucket] = engine.graphs.outputs[bucket][0].float().clone()
    for bucket in (32, 64):
        torch.testing.assert_close(logits[True, bucket], logits[False, bucket], atol=2e-2, rtol=2e-2)


def test_the_switch_reaches_the_engine_config_and_the_graph_kernels():
    # --no-cuda-paged-attn -> EngineConfig.cuda_paged_attn False -> GraphKernels.of(cfg) keeps the Triton kernel
    from roseinfer.bench.common import build_parser, engine_config, parse
    from roseinfer.graph_kernels import GraphKernels

    parser = build_parser("x", "x", "online")
    on = engine_config(parse(parser, ["--device", "cuda", "--paged-attn", "--cuda-graph"]))
    off = engine_config(
        parse(parser, ["--device", "cuda", "--paged-attn", "--cuda-graph", "--no-cuda-paged-attn"])
    )
    assert on.cuda_paged_attn and not off.cuda_paged_attn
    assert GraphKernels.of(on).cuda_paged_attention and not GraphKernels.of(off).cuda_paged_attention
