"""The one-row fused MLP (`roseinfer.cuda_ext.fused_mlp`): where it applies, everywhere; the kernel against the
torch reference and the Triton path and its stamps' truth on a GPU. The toolchain that builds it (no build on CPU,
the cache, the build lock): test_cuda_ext_build.py. Reading and recording the stamps on the host:
test_stamp_recorder.py."""

import json

import pytest
import torch

from roseinfer import cuda_ext
from roseinfer.cuda_ext import fused_attn as fa
from roseinfer.cuda_ext import fused_mlp as fm
from roseinfer.names import ATTN_KERNEL_REGION_NAMES, KERNEL_REGION_NAMES


def test_a_layer_norm_fits_the_kernels_only_as_16_byte_aligned_float16():
    # The kernels copy ln's weight and bias into shared memory 16 bytes at a time (cp.async), so a view that
    # starts 2 bytes into its storage, another dtype or another width takes the Triton path instead.
    ln = torch.nn.LayerNorm(768).half()
    assert cuda_ext.layer_norm_fits(ln, 768)
    assert not cuda_ext.layer_norm_fits(ln, 1024)
    assert not cuda_ext.layer_norm_fits(torch.nn.LayerNorm(768), 768)  # float32
    shifted = torch.nn.LayerNorm(768).half()
    shifted.weight = torch.nn.Parameter(torch.ones(769, dtype=torch.float16)[1:])
    assert shifted.weight.data_ptr() % 16 == 2
    assert not cuda_ext.layer_norm_fits(shifted, 768)
    strided = torch.nn.LayerNorm(768).half()
    strided.bias = torch.nn.Parameter(torch.zeros(1536, dtype=torch.float16)[::2])
    assert not cuda_ext.layer_norm_fits(strided, 768)
    assert not cuda_ext.layer_norm_fits(torch.nn.LayerNorm(768, bias=False).half(), 768)


def test_the_kernel_does_not_apply_on_cpu():
    from roseinfer.config import ModelConfig
    from roseinfer.model import Block

    block = Block(ModelConfig(n_layer=1, n_head=12, n_embd=768, vocab_size=100, n_positions=16))
    x, a = torch.randn(1, 768), torch.randn(1, 768)
    assert not fm.fused_mlp_applies(x, a, block.ln_2, block.c_fc, block.mlp_proj)


def test_no_cuda_mlp_reaches_the_engines_config():
    # the benchmarks' switch for the side-by-side measurement (docs/BENCHMARKS.md, issue 50): on by default
    from roseinfer.bench.common import build_parser, engine_config, parse

    parser = build_parser("benchmark_streaming", "", "online")
    assert engine_config(parse(parser, ["--device", "cuda", "--cuda-graph"])).cuda_mlp
    assert not engine_config(parse(parser, ["--device", "cuda", "--cuda-graph", "--no-cuda-mlp"])).cuda_mlp


# -- on a GPU ----------------------------------------------------------------------------------------------------


def _mlp(dtype, seed=0):
    from roseinfer.config import ModelConfig
    from roseinfer.model import Block

    torch.manual_seed(seed)
    block = Block(ModelConfig(n_layer=1, n_head=12, n_embd=768, vocab_size=100, n_positions=16))
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn_like(p) * 0.05)
        block.ln_2.weight.add_(1.0)
    block = block.to("cuda", dtype)
    x = torch.randn(1, 768, device="cuda", dtype=dtype)
    a = torch.randn(1, 768, device="cuda", dtype=dtype) * 0.5
    return block, x, a


def _reference_out(x, delta, block):
    return fm.fused_mlp_reference(x, delta, block.ln_2, block.c_fc, block.mlp_proj)


@pytest.mark.gpu
def test_a_launchers_check_with_a_number_in_its_message_raises():
    # a formatted TORCH_CHECK killed the process with a segfault on the H200 machine (torch 2.11, nvcc 13.0); the
    # launchers format such messages into one C string (ROSEINFER_CHECK, common_check.cuh), which raises
    if fa.load() is None:
        pytest.skip(cuda_ext.why_not_built(fa.NAME))
    z = torch.zeros(1024, dtype=torch.float16, device="cuda")  # 1,024 wide: not built
    e = torch.empty(0, device="cuda")
    cache = torch.zeros(8, 12, 64, 64, dtype=torch.float16, device="cuda")
    index = torch.zeros(2, dtype=torch.long, device="cuda")
    with pytest.raises(RuntimeError, match="fused_attn: width 1024 not built"):
        fa.load().fused_attn(z, e, e, e, z, z, 1e-5, z, e, e, z, z, cache, cache, index, index[:1], 0.125, z, e, e,
                             e, False, -1, 0)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("delta_kind", ["float16", "float32", "split"])
@pytest.mark.parametrize("pdl", [False, True])
def test_fused_mlp_matches_the_reference_launch_after_launch(delta_kind, pdl):
    # Two layers' buffers: each launch adds into its own (zero on entry: the launch before zeroed it) and zeroes
    # the other's, so launch after launch every output is the MLP's, not a sum with the one before. Layer 0's
    # output is a split sum of SPLIT_ROWS rows, layer 1's (the last layer's) one row. delta is float16 (attn_proj's
    # output), float32 (fused_attn's) or a split sum (this kernel's own, exact in any order:
    # tests.helpers.exact_split, so s stays bit for bit).
    from roseinfer.kernels.gemv import gemv_triton
    from roseinfer.kernels.norm_gemv import norm_gemv_triton
    from tests.helpers import exact_split

    block, x, a = _mlp(torch.float16)
    a = exact_split(768, "cuda")[0] if delta_kind == "split" else a.to(getattr(torch, delta_kind))
    assert fm.fused_mlp_applies(x, a, block.ln_2, block.c_fc, block.mlp_proj), cuda_ext.why_not_built(fm.NAME)
    scratch = fm.MlpScratch(2, x.device)
    ref_s, ref_out = _reference_out(x, a, block)
    ln = block.ln_2
    t_s, g = norm_gemv_triton(x, a, ln.weight, ln.bias, ln.eps, block.c_fc.weight, block.c_fc.bias, gelu=True)
    t_out = gemv_triton(g, block.mlp_proj.weight, block.mlp_proj.bias)
    for launch in range(5):
        s, out = fm.block_mlp(x, a, block, launch % 2, scratch, pdl=pdl)
        rows = fm.SPLIT_ROWS if launch % 2 == 0 else 1
        assert out.dtype == torch.float32 and out.shape == (rows, 768)
        assert bool((out != 0).any(dim=1).all())  # every row holds its blocks' shares (none all in row 0)
        out = out.sum(0, keepdim=True)
        torch.testing.assert_close(s, ref_s, atol=0, rtol=0)
        torch.testing.assert_close(s, t_s, atol=0, rtol=0)
        torch.testing.assert_close(out, ref_out, atol=2e-3, rtol=2e-3)
        torch.testing.assert_close(out.half(), t_out, atol=3e-3, rtol=3e-3)
    assert torch.count_nonzero(scratch.bufs[(launch + 1) % 2]) == 0  # zeroed for the next launch


@pytest.mark.gpu
def test_it_runs_in_a_captured_pdl_chain_and_matches_the_triton_block():
    from roseinfer.kernels.pdl import pdl_scope
    from roseinfer.linears import linear, norm_linear, small_batch_gemv

    block, x, a = _mlp(torch.float16, seed=1)
    scratch = fm.MlpScratch(2, x.device)
    outs = {}
    for on in (False, True):
        with small_batch_gemv(1, norm_prologue=True), pdl_scope(True, early_release=True):

            def mlp(on=on):  # the block's MLP half: the CUDA kernel, or the Triton path Block.forward runs
                if on:  # layer 0's launch, then layer 1's (same inputs), which zeroes layer 0's buffer again
                    s, out = fm.block_mlp(x, a, block, 0, scratch, pdl=True)
                    out = out.sum(0, keepdim=True).half()  # layer 0's split sum
                    fm.block_mlp(x, a, block, 1, scratch, pdl=True)
                    return s, out
                s, g = norm_linear(x, a, block.ln_2, block.c_fc, gelu=True)
                return s, linear(g, block.mlp_proj)

            mlp()  # warm-up: the transposed weight is made outside the capture
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                s, out = mlp()
            for _ in range(4):
                graph.replay()
            torch.cuda.synchronize()
            outs[on] = (s.clone(), out.clone())
    torch.testing.assert_close(outs[True][0], outs[False][0], atol=0, rtol=0)
    torch.testing.assert_close(outs[True][1], outs[False][1], atol=3e-3, rtol=3e-3)


def _profiled_launch(fn, kernel: str = fm.KERNEL):
    """Run fn once under torch.profiler; return the fused kernel's GPU duration in ns (CUPTI)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    kernels = [e for e in prof.events() if kernel in e.name]
    assert len(kernels) == 1, [e.name for e in prof.events()]
    return (kernels[0].time_range.end - kernels[0].time_range.start) * 1000  # us -> ns


@pytest.mark.gpu
@pytest.mark.parametrize("delay_us", [100, 200])
def test_stamps_add_up_to_the_kernels_duration(delay_us):
    """The ranges cover the kernel: their sum (first start to last end) against CUPTI's duration of the same
    launch, within 2%. What no stamp can see (the blocks' dispatch before their first instruction, the grid's
    retirement after the last) is ~0.8 us on an H200 (docs/BENCHMARKS.md, issue 50, session 31: the last stamp
    waits for the block's atomics to land), so a planted delay lengthens the kernel to 100 us and more (the
    production kernel, ~5 us, is not within 2%)."""
    module = fm.load(test_build=True)
    assert module is not None, cuda_ext.why_not_built(fm.NAME)
    block, x, a = _mlp(torch.float16)
    scratch = fm.MlpScratch(2, x.device, stamps=True)
    launches = [0]

    def run():  # alternate the two layers' buffers; returns the launch's stamps
        layer = launches[0] % 2
        launches[0] += 1
        fm.block_mlp(x, a, block, layer, scratch, module=module, delay=(2, delay_us * 1000))
        return scratch.stamps[layer]

    run()
    ratios = []
    for _ in range(5):
        stamps = []
        kernel_ns = _profiled_launch(lambda stamps=stamps: stamps.append(run()))
        ranges = fm.phase_ranges(stamps[0].cpu())
        ratios.append((ranges[-1][3] - ranges[0][2]) / kernel_ns)
    ratios.sort()
    print(f"stamps span / kernel duration: {ratios}")
    assert abs(ratios[2] - 1) <= 0.02, ratios


@pytest.mark.gpu
@pytest.mark.parametrize("phase,region_index", [(1, 1), (2, 2), (3, 3), (4, 4)])
def test_a_planted_delay_moves_its_region_only(phase, region_index):
    module = fm.load(test_build=True)
    assert module is not None, cuda_ext.why_not_built(fm.NAME)
    block, x, a = _mlp(torch.float16)
    scratch = fm.MlpScratch(2, x.device, stamps=True)
    delay_ns = 20_000

    def phases(delay):
        durations = []
        for launch in range(7):
            fm.block_mlp(x, a, block, launch % 2, scratch, module=module, delay=delay)
            torch.cuda.synchronize()
            durations.append([e - s for _, _, s, e in fm.phase_ranges(scratch.stamps[launch % 2].cpu())])
        return [sorted(d[k] for d in durations)[3] for k in range(len(fm.PHASES))]  # median per phase

    phases((0, 0))  # warm
    base, slow = phases((0, 0)), phases((phase, delay_ns))
    moved = [s - b for s, b in zip(slow, base)]
    assert abs(moved[region_index] - delay_ns) <= 0.1 * delay_ns, moved
    # the first phase (weights and wait) is the launch's own jitter, outside the delay: left out
    others = [m for k, m in enumerate(moved) if k not in (0, region_index)]
    assert all(abs(m) <= 0.1 * delay_ns for m in others), moved


@pytest.mark.gpu
def test_the_engine_runs_the_fused_mlp_and_matches_the_triton_path(tmp_path):
    # A 768-wide checkpoint (the width built), fp16 with CUDA graphs: the captured batch-1 step runs the split-K
    # kernel by default (its layer buffers hold the last step's MLP outputs) and gives the same tokens as the
    # Triton path (`GraphKernels(cuda_mlp=False)`, i.e. --no-cuda-mlp), and logits within fp16 rounding.
    from roseinfer import LLM, SamplingParams
    from roseinfer.graph_kernels import GraphKernels
    from tests.helpers import save_checkpoint
    from tests.roseinfer.test_engine_matches_hf import make_prompts

    checkpoint = save_checkpoint(tmp_path / "gpt2-768", n_head=12, n_embd=768)
    runs = []
    for kernels in (None, GraphKernels(cuda_mlp=False)):
        llm = LLM(
            checkpoint, device="cuda", dtype="float16", max_batch_size=4, cuda_graph=True, paged_attn=True
        )
        if kernels is not None:
            llm.engine.use_static_decode(capture=True, kernels=kernels)
        params = SamplingParams(max_new_tokens=24, ignore_eos=True)
        outs = [llm.generate([p], params)[0].token_ids for p in make_prompts()[:3]]
        scratch = llm.engine.graphs.mlp_scratch
        ran = scratch is not None and bool(torch.count_nonzero(scratch.bufs[-1]))
        runs.append((outs, llm.engine.graphs.outputs[1][0].clone(), ran))
    (outs, logits, ran), (outs_triton, logits_triton, ran_triton) = runs
    assert ran and not ran_triton
    assert outs == outs_triton
    torch.testing.assert_close(logits.float(), logits_triton.float(), atol=5e-2, rtol=2e-2)


@pytest.mark.gpu
def test_a_profiled_engine_writes_each_launchs_stamps(tmp_path, monkeypatch):
    # With the regions on for a profiler (here record_function) and a stamps file asked for, as roseprof asks, the
    # captured batch-1 step runs the stamping kernels (the attention half's and the MLP's) and every launch gets its
    # line, each kernel's in its launch order: the layers of the two warm-up forwards before the capture, then of
    # every replay.
    from roseinfer import LLM, SamplingParams, tracing
    from roseinfer.names import ROSEINFER_KERNEL_STAMPS
    from tests.helpers import save_checkpoint

    checkpoint = save_checkpoint(tmp_path / "gpt2-768", n_head=12, n_embd=768)
    path = tmp_path / "kernel_stamps.jsonl"
    monkeypatch.setenv(ROSEINFER_KERNEL_STAMPS, str(path))
    before = tracing.set_record_function(True)
    try:
        llm = LLM(
            checkpoint, device="cuda", dtype="float16", max_batch_size=1, cuda_graph=True, paged_attn=True
        )
        llm.generate([[5, 6, 7]], SamplingParams(max_new_tokens=24, ignore_eos=True))
        recorder = llm.engine.graphs.stamp_recorder
        graphs = llm.engine.graphs
        assert recorder is not None and graphs.mlp_scratch.stamps.shape == (2, fm.BLOCKS, fm.NSTAMP)
        assert graphs.attn_scratch.stamps.shape == (2, fa.BLOCKS, fa.NSTAMP)
        recorder.close()
    finally:
        tracing.set_record_function(before)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    steps = llm.engine.stats["decode_steps"]
    print(f"{len(lines)} lines, {steps} decode steps")
    for kernel, regions in ((fm.KERNEL, KERNEL_REGION_NAMES), (fa.KERNEL, ATTN_KERNEL_REGION_NAMES)):
        mine = [line for line in lines if line["kernel"] == kernel]
        assert len(mine) == 2 * (2 + steps), kernel
        for line in mine:
            assert line["regions"] == list(regions)
            assert line["bounds_ns"] == sorted(line["bounds_ns"]) and line["bounds_ns"][0] > 0
        # launch order on one stream: each launch starts after the one before it (a slot of the recorder's ring
        # written from another step, or steps out of order, would break this)
        starts = [line["bounds_ns"][0] for line in mine]
        assert starts == sorted(starts) and len(set(starts)) == len(starts), kernel
    assert len(lines) == 2 * 2 * (2 + steps)
