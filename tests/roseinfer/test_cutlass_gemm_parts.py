"""The CUTLASS GEMM's K-split form (`roseinfer.cuda_ext.cutlass_gemm.cutlass_gemm_parts`): attn_proj and mlp_proj at
33 to 512 rows as float32 parts over slices of K (`roseinfer.kernels.split_sum.SplitK`), which the residual add +
LayerNorm after them sums. Where it splits, what reads the parts, and on a GPU that they add up to what one part
computes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from roseinfer import cuda_ext
from roseinfer.cuda_ext import cutlass_gemm as cg
from roseinfer.linears import small_batch_gemv
from tests.roseinfer.test_cutlass_gemm_graphs import _replayed_logits


def test_a_k_split_takes_whole_tiles_near_the_asked_depth():
    # GPT-2 small's attn_proj (K 768) and mlp_proj (3,072), gpt2-medium's (1,024, 4,096), and the tiny checkpoint's
    asked = {(768, 384): 2, (3072, 384): 8, (768, 768): 1, (3072, 768): 4, (768, 256): 3, (3072, 256): 12}
    asked |= {(1024, 384): 2, (4096, 384): 8, (64, 384): 1, (256, 64): 4, (3072, 0): 1, (96, 64): 1}
    # rounded to the nearest count, not down: 3,072 / 1,228 is 2.502 (3 parts), 3,072 / 1,100 is 2.8 (3), 3,072 /
    # 700 is 4.4 (4); 768 / 400 is 1.9, and 2 parts of 384 are whole tiles
    asked |= {(768, 400): 2, (3072, 1228): 3, (3072, 700): 4, (3072, 1100): 3}
    assert {key: cg.split_count(*key) for key in asked} == asked
    # whatever is asked, every split's parts are whole 64-deep tiles
    for k in range(64, 8193, 64):
        for k_per_split in (64, 100, 384, 768, 1000, 1536):
            splits = cg.split_count(k, k_per_split)
            assert splits >= 1 and (splits == 1 or k % (cg.K_TILE * splits) == 0), (k, k_per_split, splits)


def test_the_fewest_parts_split_attn_proj_and_leave_mlp_proj():
    # GraphKernels.cutlass_min_splits (3, up to 64 rows): GPT-2 small's attn_proj (K 768, one part of 768) in 3,
    # gpt2-medium's (1,024) in 2 (3 parts would not be whole 64-deep tiles), their mlp_proj as the depth says
    from roseinfer.graph_kernels import CUTLASS_MIN_SPLITS, CUTLASS_SPLIT_K, GraphKernels

    k = GraphKernels()
    assert (k.cutlass_min_splits, k.cutlass_min_splits_max_batch, k.cutlass_split_k) == (3, 64, 768)
    got = {
        depth: cg.split_count(depth, CUTLASS_SPLIT_K, CUTLASS_MIN_SPLITS) for depth in (768, 3072, 1024, 4096)
    }
    assert got == {768: 3, 3072: 4, 1024: 2, 4096: 4}
    assert cg.split_count(768, 0, 3) == 1  # no split asked: none
    for depth in range(64, 8193, 64):
        for at_least in (1, 2, 3, 5):
            splits = cg.split_count(depth, CUTLASS_SPLIT_K, at_least)
            assert splits == 1 or depth % (cg.K_TILE * splits) == 0, (depth, at_least, splits)


def test_a_k_split_stands_for_its_sum_wherever_it_is_read():
    # the parts' reader on CPU, and any reader that is not the fused add + LayerNorm, joins them: the sum plus the
    # bias, rounded once to the bias's dtype
    from roseinfer.kernels.add_layernorm import add_layer_norm_reference
    from roseinfer.kernels.split_sum import SplitK, joined
    from roseinfer.model import residual_layer_norm

    torch.manual_seed(0)
    parts, bias = torch.randn(4, 6, 16), torch.randn(16).half()
    split = SplitK(parts, bias)
    whole = (parts.sum(0) + bias.float()).half()  # [6, 16]
    x = torch.randn(6, 16).half()
    assert torch.equal(split.joined(), whole) and torch.equal(joined(x, split), whole)
    assert torch.equal(split.rows(torch.tensor([5, 0])).joined(), whole[[5, 0]])
    ln = torch.nn.LayerNorm(16).half()
    ref_s, ref_y = add_layer_norm_reference(
        x.float(), whole.float(), ln.weight.float(), ln.bias.float(), ln.eps
    )
    s, y = add_layer_norm_reference(x.float(), split, ln.weight.float(), ln.bias.float(), ln.eps)
    assert torch.equal(s, ref_s) and torch.equal(y, ref_y)
    with torch.no_grad():  # the model's unfused path (CPU engines; no Triton kernel on CPU tensors)
        s, y = residual_layer_norm(x.float(), split, ln.float(), fused=False)
    assert torch.equal(s, ref_s) and torch.equal(y, ref_y)


def test_a_residual_linear_splits_only_where_the_cutlass_gemm_would_run(monkeypatch):
    # the kernels stubbed (no GPU here): attn_proj and mlp_proj take the linears' order (the GEMV, then the skinny
    # GEMM, then CUTLASS) and split only where CUTLASS is the one that runs
    from roseinfer import linears
    from roseinfer.kernels import gemv, skinny_gemm
    from roseinfer.kernels.split_sum import SplitK

    def parts(x, w, splits, shallow):
        return torch.zeros(splits, x.shape[0], w.shape[0])

    monkeypatch.setattr(linears, "_triton_input", lambda x: True)
    monkeypatch.setattr(gemv, "gemv_triton", lambda x, w, b, gelu: "gemv")
    monkeypatch.setattr(skinny_gemm, "skinny_gemm_fits", lambda x, w: True)
    monkeypatch.setattr(skinny_gemm, "skinny_gemm_triton", lambda x, w, b, gelu, scratch: "skinny")
    monkeypatch.setattr(cg, "fits", lambda x, w, b: b is not None)
    monkeypatch.setattr(cg, "cutlass_gemm", lambda x, w, b, gelu, shallow: "cutlass")
    monkeypatch.setattr(cg, "cutlass_gemm_parts", parts)
    mlp_proj = torch.nn.Linear(3072, 768).half()
    x = torch.zeros(64, 3072).half()
    with small_batch_gemv(8, skinny_max_rows=64, cutlass_rows=(32, 64), cutlass_split_k=768):
        assert linears.linear(x, mlp_proj) == "skinny"
        # a skinny GEMM asked for at 64 rows runs first
        assert linears.linear_to_residual(x, mlp_proj) == "skinny"
    with small_batch_gemv(64, cutlass_rows=(32, 64), cutlass_split_k=768):
        # likewise a GEMV asked for at 64 rows (mlp_proj: N <= K)
        assert linears.linear_to_residual(x, mlp_proj) == "gemv"
    with small_batch_gemv(8, skinny_max_rows=32, cutlass_rows=(32, 64), cutlass_split_k=768):
        split = linears.linear_to_residual(x, mlp_proj)
        assert isinstance(split, SplitK) and split.parts.shape == (4, 64, 768) and split.bias is mlp_proj.bias
        # where CUTLASS does not fit (no bias, say) nothing splits: torch's linear
        no_bias = torch.nn.Linear(3072, 768, bias=False).half()
        assert isinstance(linears.linear_to_residual(x, no_bias), torch.Tensor)
        # K 768 in parts of 768: whole
        attn_proj = torch.nn.Linear(768, 768).half()
        assert linears.linear_to_residual(x[:, :768], attn_proj) == "cutlass"
    with small_batch_gemv(8, skinny_max_rows=32, cutlass_rows=(32, 64), cutlass_split_k=0):
        assert linears.linear_to_residual(x, mlp_proj) == "cutlass"  # no split asked: one part, as before


def test_off_the_gpu_a_residual_linear_is_one_tensor():
    from roseinfer.linears import linear_to_residual

    lin = torch.nn.Linear(3072, 768).half()
    x = torch.randn(64, 3072).half()
    with torch.no_grad(), small_batch_gemv(0, cutlass_rows=(32, 64), cutlass_split_k=384):
        out = linear_to_residual(x, lin)
    assert isinstance(out, torch.Tensor)
    torch.testing.assert_close(out, F.linear(x, lin.weight, lin.bias))


@pytest.mark.gpu
@pytest.mark.parametrize("shallow", [False, True])
@pytest.mark.parametrize("rows", [512, 200, 64, 40, 33])
@pytest.mark.parametrize(
    "n,k,splits", [(768, 768, 2), (768, 3072, 8), (768, 3072, 4), (1024, 4096, 8), (768, 768, 3)]
)
def test_its_k_parts_add_up_to_the_product(rows, n, k, splits, shallow):
    # each part is its own slice of K's product (in float32, no bias), and the parts' sum is the product
    if cg.module() is None:
        pytest.skip(cuda_ext.why_not_built(cg.NAME))
    torch.manual_seed(2)
    wide = torch.randn(rows, k + 64, device="cuda").half()
    x = wide[:, 64:]  # rows of a wider buffer, as attn_proj's input is not, to test the row stride
    w = (torch.randn(n, k, device="cuda") * 0.02).half()
    parts = cg.cutlass_gemm_parts(x, w, splits, shallow=shallow)
    assert parts.shape == (splits, rows, n) and parts.dtype == torch.float32
    depth = k // splits
    for i in range(splits):
        ref = x[:, i * depth : (i + 1) * depth].float() @ w[:, i * depth : (i + 1) * depth].float().t()
        torch.testing.assert_close(parts[i], ref, atol=1e-3, rtol=1e-3)
    torch.testing.assert_close(parts.sum(0), x.float() @ w.float().t(), atol=2e-3, rtol=2e-3)


@pytest.mark.gpu
def test_the_add_and_layernorm_reads_k_parts_as_their_sum():
    # the parts' one reader in the step: the Triton add + LayerNorm with the linear's bias added as it reads
    from roseinfer.kernels.add_layernorm import add_layer_norm_triton
    from roseinfer.kernels.split_sum import SplitK

    torch.manual_seed(3)
    x = torch.randn(64, 768, device="cuda").half()
    parts, bias = torch.randn(8, 64, 768, device="cuda"), torch.randn(768, device="cuda").half()
    ln = torch.nn.LayerNorm(768, device="cuda", dtype=torch.float16)
    split = SplitK(parts, bias)
    s, y = add_layer_norm_triton(x, split, ln.weight, ln.bias, ln.eps)
    # joined, the parts are summed in another order (the bias last): a float16 rounding apart at most
    ref_s, ref_y = add_layer_norm_triton(x, split.joined(), ln.weight, ln.bias, ln.eps)
    torch.testing.assert_close(s, ref_s, atol=1e-2, rtol=1e-3)
    torch.testing.assert_close(y, ref_y, atol=1e-2, rtol=1e-2)
    # the rows of a split: gathered (a copy), and a slice (a strided view of its parts, not contiguous)
    rows = torch.tensor([3, 1, 60], device="cuda")
    s_rows, _ = add_layer_norm_triton(x[rows], split.rows(rows), ln.weight, ln.bias, ln.eps)
    assert torch.equal(s_rows, s[rows])
    view = split.rows(slice(8, 40))
    assert not view.parts.is_contiguous()
    s_view, _ = add_layer_norm_triton(x[8:40], view, ln.weight, ln.bias, ln.eps)
    assert torch.equal(s_view, s[8:40])


@pytest.mark.gpu
def test_graph_decode_with_k_parts_agrees_with_one_part(tiny_checkpoint, monkeypatch):
    # the tiny checkpoint's mlp_proj (K 256) in four 64-deep parts and attn_proj (K 64) whole: the captured step
    # of buckets 48 and 64 with the split, without it, and on cuBLAS, on the same inputs and cache; the parts are
    # read by the add + LayerNorm kernel itself (nothing joins them)
    from roseinfer import LLM, SamplingParams
    from roseinfer.graph_kernels import GraphKernels
    from roseinfer.kernels.split_sum import SplitK

    if cg.module() is None:
        pytest.skip(cuda_ext.why_not_built(cg.NAME))
    llm = LLM(
        tiny_checkpoint, device="cuda", dtype="float16", max_batch_size=64, cuda_graph=True, paged_attn=True
    )
    llm.generate(["hello world"] * 64, SamplingParams(max_new_tokens=2, ignore_eos=True))
    engine = llm.engine
    splits = []
    real = cg.cutlass_gemm_parts
    monkeypatch.setattr(
        cg, "cutlass_gemm_parts", lambda x, w, s, **kw: splits.append((w.shape[1], s)) or real(x, w, s, **kw)
    )
    logits = {}
    kinds = {
        "split": GraphKernels(cutlass_split_k=64),
        "whole": GraphKernels(cutlass_split_k=0),
        "cublas": GraphKernels(cutlass_gemm_max_batch=0),
    }
    monkeypatch.setattr(
        SplitK, "joined", lambda self: pytest.fail("a K split's parts were joined in the step")
    )
    for name, kernels in kinds.items():
        logits[name] = _replayed_logits(engine, kernels)
        if name == "split":  # captured: each bucket's mlp_proj per layer, in 4 parts, and no attn_proj (K 64)
            assert splits and set(splits) == {(256, 4)}
            splits.clear()
    assert splits == []
    for bucket in (48, 64):
        torch.testing.assert_close(logits["split"][bucket], logits["whole"][bucket], atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(logits["split"][bucket], logits["cublas"][bucket], atol=2e-2, rtol=2e-2)
