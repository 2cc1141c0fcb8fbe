"""The CUTLASS GEMM for the linears at 33 to 512 rows (`roseinfer.cuda_ext.cutlass_gemm`): where it runs, where it
does not (the CPU CI: never built, every linear on cuBLAS), and on a GPU that it computes what cuBLAS does."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from roseinfer import cuda_ext
from roseinfer.cuda_ext import cutlass_gemm as cg
from roseinfer.linears import linear, small_batch_gemv


def test_off_the_gpu_it_is_not_built_and_says_why():
    if torch.cuda.is_available():
        pytest.skip("a GPU machine: the build is tested below")
    assert cg.module() is None
    assert cuda_ext.why_not_built(cg.NAME) == "not built: no CUDA"
    lin = torch.nn.Linear(768, 2304).half()
    x = torch.randn(64, 768).half()
    assert not cg.fits(x, lin.weight, lin.bias)
    # the engine's dispatch inside its rows falls back to torch
    with torch.no_grad(), small_batch_gemv(0, cutlass_rows=(32, 64)):
        out = linear(x, lin)
    torch.testing.assert_close(out, F.linear(x, lin.weight, lin.bias))


def test_what_tma_cannot_address_does_not_fit():
    # `shapes_fit` (no GPU needed): what the launcher would refuse, or TMA could not address, falls back to cuBLAS;
    # each case below has one fault
    w, b = torch.zeros(768, 768).half(), torch.zeros(768).half()
    x = torch.zeros(64, 768).half()
    assert cg.shapes_fit(x, w, b)
    assert cg.shapes_fit(torch.zeros(64, 2304).half()[:, 768:1536], w, b)  # rows of a wider buffer
    assert cg.shapes_fit(torch.zeros(33, 768).half(), w, b)
    assert cg.shapes_fit(torch.zeros(cg.MAX_ROWS, 768).half(), w, b)  # a 64-token tile every 64 rows
    faults = {
        "no bias": (x, w, None),
        "a float32 bias": (x, w, b.float()),
        "a float32 x": (x.float(), w, b),
        "more rows than MAX_ROWS": (torch.zeros(cg.MAX_ROWS + 1, 768).half(), w, b),
        "no rows": (torch.zeros(0, 768).half(), w, b),
        "x 3-D": (torch.zeros(1, 64, 768).half(), w, b),
        "K disagrees": (torch.zeros(64, 776).half()[:, :768], torch.zeros(768, 776).half(), b),
        "bias [N] disagrees": (x, w, torch.zeros(760).half()),
        "bias 2-D": (x, w, torch.zeros(2, 384).half()),
        "bias not contiguous": (x, w, torch.zeros(1536).half()[::2]),
        "weight not contiguous": (x, torch.zeros(768, 1536).half()[:, ::2], b),
        "x's columns strided": (torch.zeros(64, 1536).half()[:, ::2], w, b),
        "x's rows 0 apart": (torch.zeros(1, 768).half().expand(64, 768), w, b),
        "x's row stride not a multiple of 8": (torch.zeros(64, 772).half()[:, :768], w, b),
        "N not a multiple of 8": (x, torch.zeros(764, 768).half(), torch.zeros(764).half()),
        "K not a multiple of 8": (torch.zeros(64, 768).half()[:, :764], torch.zeros(768, 764).half(), b),
        "no columns": (torch.zeros(64, 8).half()[:, :0], torch.zeros(768, 0).half(), b),
        "x not 16-byte aligned": (torch.zeros(64 * 768 + 1).half()[1:].view(64, 768), w, b),
    }
    fitting = [name for name, args in faults.items() if cg.shapes_fit(*args)]
    assert fitting == []


def test_only_a_hopper_gpu_builds_it(monkeypatch):
    # the example's kernel is an empty stub on any other GPU: no build there, and no word about the wheel
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(cg, "cutlass_source", lambda: pytest.fail("the headers were looked for"))
    for capability, name in (((8, 0), "sm_80"), ((10, 0), "sm_100"), ((12, 0), "sm_120")):
        monkeypatch.setattr(torch.cuda, "get_device_capability", lambda c=capability: c)
        cg.module.cache_clear()
        assert cg.module() is None
        assert cuda_ext.why_not_built(cg.NAME) == f"not built: needs a Hopper GPU (sm_90), this GPU is {name}"
    cg.module.cache_clear()


def test_the_headers_are_found_by_the_pinned_distribution_or_it_says_why(monkeypatch, tmp_path):
    import importlib.metadata

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "distribution", missing)
    assert cg.cutlass_source() == (
        None,
        f"no CUTLASS headers (pip install --no-deps nvidia-cutlass=={cg.CUTLASS_VERSION})",
    )

    class Dist:
        def __init__(self, version):
            self.version = version

        def locate_file(self, path):
            return tmp_path / path

    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Dist("4.3.0.0"))
    source, why = cg.cutlass_source()
    assert source is None and why.startswith(f"needs nvidia-cutlass=={cg.CUTLASS_VERSION}, found 4.3.0.0")
    monkeypatch.setattr(importlib.metadata, "distribution", lambda name: Dist(cg.CUTLASS_VERSION))
    source, why = cg.cutlass_source()
    assert source is None and why.endswith("missing from the nvidia-cutlass wheel")
    (tmp_path / "cutlass_library/source" / cg.EXAMPLE).mkdir(parents=True)
    assert cg.cutlass_source() == (tmp_path / "cutlass_library/source", "")
    # the headers' place and version are in the build's flags, so in its cache key
    flags = cg.build_flags(tmp_path / "cutlass_library/source")
    assert f"-I{tmp_path / 'cutlass_library/source/include'}" in flags
    assert f"-DROSEINFER_CUTLASS_{cg.CUTLASS_VERSION.replace('.', '_')}" in flags


def test_no_cutlass_gemm_reaches_the_engines_config():
    # the benchmarks' switch for the side-by-side measurement (docs/BENCHMARKS.md, issue 50): on by default, and
    # the captured step's kernels follow it
    from roseinfer.bench.common import build_parser, engine_config, parse
    from roseinfer.graph_kernels import GraphKernels

    parser = build_parser("benchmark_scheduler", "", "offline")
    on = engine_config(parse(parser, ["--device", "cuda", "--cuda-graph"]))
    off = engine_config(parse(parser, ["--device", "cuda", "--cuda-graph", "--no-cutlass-gemm"]))
    assert on.cutlass_gemm and not off.cutlass_gemm
    assert GraphKernels.of(on) == GraphKernels()
    # (one stream too)
    assert GraphKernels.of(off) == GraphKernels(cutlass_gemm_max_batch=0, halves_from=0, halves_wide_from=0)


def test_its_buckets_take_pdl_and_the_rows_above_the_skinny_gemm():
    from roseinfer.graph_kernels import GraphKernels

    k = GraphKernels()
    rows = (1, 8, 16, 32, 48, 64, 80, 128, 256, 272, 304, 512, 528)
    in_cutlass = [48, 64, 80, 128, 256, 304, 512]  # (not 272: `cutlass_cublas_rows`)
    assert [b for b in rows if k.cutlass_in(b, 768)] == in_cutlass
    # above 32 rows whatever the skinny GEMM's bound: without it buckets 16 and 32 are cuBLAS's, as before
    assert [
        b for b in (1, 8, 16, 32, 48, 64) if GraphKernels(skinny_gemm_max_batch=0).cutlass_in(b, 768)
    ] == [
        48,
        64,
    ]
    # gpt2-medium (1,024 wide) takes PDL at 48 to 128 rows only where the CUTLASS GEMM runs there; beyond 128 rows
    # its step was slower with it (session 48): cuBLAS and the rules before, unless a measurement asks
    assert k.pdl_in(64, 1024) and not GraphKernels(cutlass_gemm_max_batch=0).pdl_in(64, 1024)
    assert [b for b in (48, 64, 80, 128, 144, 256) if k.cutlass_in(b, 1024)] == [48, 64, 80, 128]
    assert not k.pdl_in(144, 1024) and k.pdl_in(512, 768) and not k.pdl_in(528, 768)
    assert GraphKernels(cutlass_wide_max_batch=256).cutlass_in(256, 1024)
    # up to the bound asked for (a measurement hook), never past the rows the kernel takes
    assert [b for b in (64, 80, 128, 144) if GraphKernels(cutlass_gemm_max_batch=128).cutlass_in(b, 768)] == [
        64,
        80,
        128,
    ]
    assert [b for b in (256, 512, 528) if GraphKernels(cutlass_gemm_max_batch=1024).cutlass_in(b, 768)] == [
        256,
        512,
    ]


def test_a_cpu_engine_runs_its_buckets_as_before(tiny_checkpoint):
    # where the kernel cannot run (no CUDA) the graphs' kernels say so: no CUTLASS rows, PDL by the rules before it
    from roseinfer import LLM

    llm = LLM(tiny_checkpoint, device="cpu", max_batch_size=64)
    llm.engine.use_static_decode(capture=False)  # the static path uncaptured: how the CPU checks it
    assert llm.engine.graphs.kernels.cutlass_gemm_max_batch == 0
    assert not llm.engine.graphs.kernels.pdl_in(64, 1024)


# -- on a GPU ----------------------------------------------------------------------------------------------------

SHAPES = [(2304, 768, False), (768, 768, False), (3072, 768, True), (768, 3072, False), (3072, 1024, False)]


def _reference(x, w, b, gelu):
    ref = x.float() @ w.float().t() + b.float()
    return F.gelu(ref, approximate="tanh") if gelu else ref


@pytest.mark.gpu
@pytest.mark.parametrize("shallow", [False, True])
@pytest.mark.parametrize("rows", [512, 300, 128, 65, 64, 40, 33, 1])
@pytest.mark.parametrize("n,k,gelu", SHAPES)
def test_it_matches_the_reference_as_closely_as_cublas(rows, n, k, gelu, shallow):
    # GPT-2 small's four linears (c_fc with its tanh GELU) and gpt2-medium's c_fc without it; fewer rows than
    # the tile's 64 (the TMA loads past the last row read zeros, the stores stop there), and several token tiles
    # up to MAX_ROWS, the last one partial at 65 and 300
    if cg.module() is None:
        pytest.skip(cuda_ext.why_not_built(cg.NAME))
    torch.manual_seed(0)
    x = torch.randn(rows, k, device="cuda").half()
    w, b = (torch.randn(n, k, device="cuda") * 0.02).half(), (torch.randn(n, device="cuda") * 0.1).half()
    ref = _reference(x, w, b, gelu)
    cublas = torch._addmm_activation(b, x, w.t(), use_gelu=True) if gelu else F.linear(x, w, b)
    assert cg.module().stages() == 13  # every 64-deep K tile of a 768-deep K loads before the wait
    assert (
        cg.module().part_stages() == 12
    )  # a part of 768 likewise (its float32 epilogue takes one stage's room)
    # the shallow form: 4 of a 768-deep K's 12 tiles before the wait, 8 after
    assert cg.module().stages(True) == cg.module().part_stages(True) == cg.SHALLOW_STAGES == 4
    out = cg.cutlass_gemm(x, w, b, gelu=gelu, shallow=shallow)
    assert out.shape == (rows, n) and out.dtype == torch.float16
    err, cublas_err = (out.float() - ref).abs().max().item(), (cublas.float() - ref).abs().max().item()
    assert err <= max(2 * cublas_err, 2e-3), (err, cublas_err)


@pytest.mark.gpu
def test_x_may_be_rows_of_a_wider_buffer():
    if cg.module() is None:
        pytest.skip(cuda_ext.why_not_built(cg.NAME))
    torch.manual_seed(1)
    wide = torch.randn(64, 2304, device="cuda").half()
    x = wide[:, 768:1536]  # [64, 768], row stride 2304
    w, b = (torch.randn(768, 768, device="cuda") * 0.02).half(), torch.zeros(768, device="cuda").half()
    assert cg.fits(x, w, b)
    torch.testing.assert_close(cg.cutlass_gemm(x, w, b), F.linear(x.contiguous(), w, b), atol=2e-3, rtol=2e-3)
    # what TMA cannot address falls back: a row stride not a multiple of 8, no bias, float32
    assert not cg.fits(torch.randn(64, 772, device="cuda").half()[:, :768], w, b)
    assert not cg.fits(x, w, None)
    assert not cg.fits(x.float(), w.float(), b.float())


@pytest.mark.gpu
def test_the_linears_dispatch_it_inside_its_rows_only(monkeypatch):
    if cg.module() is None:
        pytest.skip(cuda_ext.why_not_built(cg.NAME))
    calls = []
    real = cg.cutlass_gemm
    monkeypatch.setattr(cg, "cutlass_gemm", lambda *a, **kw: calls.append(a[0].shape[0]) or real(*a, **kw))
    lin = torch.nn.Linear(768, 3072, device="cuda", dtype=torch.float16)
    with torch.no_grad(), small_batch_gemv(0, cutlass_rows=(32, 64)):
        for rows in (32, 33, 64, 65):
            x = torch.randn(rows, 768, device="cuda").half()
            out = linear(x, lin, gelu=True)
            ref = _reference(x, lin.weight, lin.bias, gelu=True)
            torch.testing.assert_close(out.float(), ref, atol=1e-2, rtol=1e-2)
    assert calls == [33, 64]


def test_the_linears_take_the_shallow_pipeline_where_asked(monkeypatch):
    if cg.module() is None:
        pytest.skip(cuda_ext.why_not_built(cg.NAME))
    calls = []
    real, real_parts = cg.cutlass_gemm, cg.cutlass_gemm_parts
    monkeypatch.setattr(
        cg, "cutlass_gemm", lambda *a, **kw: calls.append(("gemm", kw["shallow"])) or real(*a, **kw)
    )
    monkeypatch.setattr(
        cg,
        "cutlass_gemm_parts",
        lambda *a, **kw: calls.append(("parts", kw["shallow"])) or real_parts(*a, **kw),
    )
    from roseinfer.linears import linear_to_residual

    lin = torch.nn.Linear(3072, 768, device="cuda", dtype=torch.float16)
    x = torch.randn(300, 3072, device="cuda").half()
    with torch.no_grad():
        for shallow in (False, True):
            with small_batch_gemv(0, cutlass_rows=(32, 512), cutlass_split_k=768, cutlass_shallow=shallow):
                whole = linear(x, lin)
                parts = linear_to_residual(x, lin)
            ref = _reference(x, lin.weight, lin.bias, gelu=False)
            torch.testing.assert_close(whole.float(), ref, atol=2e-2, rtol=2e-2)
            torch.testing.assert_close(parts.parts.sum(0) + lin.bias.float(), ref, atol=2e-2, rtol=2e-2)
    assert calls == [("gemm", False), ("parts", False), ("gemm", True), ("parts", True)]


def test_a_float16_gpu_step_without_it_says_why_once(capsys, monkeypatch):
    # a GPU engine whose CUTLASS GEMM is not built (no nvidia-cutlass wheel, say) runs those buckets on cuBLAS
    # and says so on stderr, once a process
    from types import SimpleNamespace

    from roseinfer.cuda_graphs import cutlass_gemm_runs

    monkeypatch.setattr(cg, "module", lambda: None)
    monkeypatch.setitem(cuda_ext._WHY_NOT, cg.NAME, f"not built: no CUTLASS headers ({cg.INSTALL})")
    cg.say_not_built.cache_clear()
    model, cache = torch.nn.Linear(2, 2).half(), SimpleNamespace(is_cuda=True)
    assert not cutlass_gemm_runs(model, cache) and not cutlass_gemm_runs(model, cache)
    assert not cutlass_gemm_runs(torch.nn.Linear(2, 2), cache)  # float32: never its kernel, nothing to say
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f"roseinfer: the CUTLASS GEMM's buckets (33 rows and more) on cuBLAS, it is not built: no CUTLASS headers "
        f"({cg.INSTALL})"
    ]
    cg.say_not_built.cache_clear()
