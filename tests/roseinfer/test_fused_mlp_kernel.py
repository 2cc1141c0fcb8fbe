"""The one-row fused MLP kernel (`roseinfer.kernels.fused_mlp`) against its plain-torch reference: odd shapes, many
launches on one barrier counter, a PDL chain in a captured graph, and its dispatch (`roseinfer.linears`)."""

import pytest
import torch

from roseinfer.bench.timing import captured
from roseinfer.kernels.fused_mlp import MlpScratch, fused_mlp_reference, pick_config, resident_programs


def _rand(g, *shape, dtype, device, scale=1.0):
    return (torch.randn(*shape, generator=g, device=device) * scale).to(dtype)


def _params(g, c, h, dtype, device):
    def vec(n, base=0.0):
        return _rand(g, n, dtype=dtype, device=device, scale=0.1) + base

    return (
        vec(c, 1.0), vec(c), 1e-5,  # ln_2
        _rand(g, h, c, dtype=dtype, device=device, scale=c**-0.5), vec(h),  # c_fc
        _rand(g, c, h, dtype=dtype, device=device, scale=h**-0.5), vec(c),  # mlp_proj
    )  # fmt: skip


def test_reference_is_add_layernorm_then_gpt2_mlp():
    g = torch.Generator().manual_seed(0)
    c, h = 40, 160
    x, d = (_rand(g, 1, c, dtype=torch.float32, device="cpu") for _ in range(2))
    ln = torch.nn.LayerNorm(c)
    fc, proj = torch.nn.Linear(c, h), torch.nn.Linear(h, c)
    with torch.no_grad():
        ln.weight.uniform_(0.5, 1.5)
        s, out = fused_mlp_reference(
            x, d, ln.weight, ln.bias, ln.eps, fc.weight, fc.bias, proj.weight, proj.bias
        )
        torch.testing.assert_close(s, x + d)
        torch.testing.assert_close(out, proj(torch.nn.functional.gelu(fc(ln(x + d)), approximate="tanh")))


@pytest.mark.parametrize("c,h", [(768, 3072), (1024, 4096), (100, 300), (64, 256), (1600, 6400), (33, 7)])
@pytest.mark.parametrize("sms", [132, 114, 16])
def test_picked_config_keeps_every_program_resident(c, h, sms):
    # The grid barrier needs every program resident at once whatever registers the compiler gives them (at most
    # 4 programs of 2 warps an SM, 2 of 4, 1 of 8), and each program's two weight tiles within its threads'
    # registers; where that cannot be, None (the two-kernel MLP runs instead).
    cfg = pick_config(c, h, sms)
    if cfg is None:
        return
    p = -(-c // cfg.block_o)
    assert p <= resident_programs(sms, cfg.num_warps) <= sms * 64 // cfg.num_warps and p * cfg.block_o >= c
    assert cfg.block_o & (cfg.block_o - 1) == 0 and cfg.num_warps in (2, 4, 8)


def test_gpt2_small_and_medium_fit_on_an_h100():
    assert pick_config(768, 3072, 132) is not None and pick_config(1024, 4096, 132) is not None


@pytest.mark.gpu
@pytest.mark.parametrize("c,h", [(768, 3072), (1024, 4096), (100, 300), (64, 256), (520, 1000)])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_fused_mlp_matches_reference_over_many_launches(c, h, dtype):
    # Eager launches, each on fresh inputs, all on one block's barrier counter: a launch that waited for the wrong
    # count would read a half-written hidden row.
    from roseinfer.kernels.fused_mlp import fused_mlp_triton

    g = torch.Generator(device="cuda").manual_seed(c + h)
    params = _params(g, c, h, dtype, "cuda")
    scratch = MlpScratch()
    for _ in range(5):
        x, d = (_rand(g, 1, c, dtype=dtype, device="cuda") for _ in range(2))
        s, out = fused_mlp_triton(x, d, *params, scratch, pdl=False)
        s_ref, out_ref = fused_mlp_reference(x, d, *params)
        assert torch.equal(s, s_ref)
        tol = 3e-2 if dtype == torch.bfloat16 else 1e-2
        torch.testing.assert_close(out.float(), out_ref.float(), atol=tol, rtol=tol)
    hidden, counter = scratch.get(h, dtype, torch.device("cuda", torch.cuda.current_device()))
    p = -(-c // pick_config(c, h, torch.cuda.get_device_properties(0).multi_processor_count).block_o)
    assert counter.item() == 5 * p  # every program of every launch arrived once


@pytest.mark.gpu
@pytest.mark.parametrize("early", [False, True])
def test_fused_mlp_in_a_pdl_chain_in_a_graph_matches_reference(early):
    # A GPT-2 small layer at batch 1 as the engine runs it: [add + LN + c_attn], attn_proj, [the fused MLP], then
    # the next layer's [add + LN + c_attn] reading the MLP's output, each a PDL launch, replayed on fresh inputs and
    # checked link by link against the reference.
    from roseinfer.kernels.fused_mlp import fused_mlp_triton
    from roseinfer.kernels.gemv import gemv_reference, gemv_triton, norm_gemv_reference, norm_gemv_triton
    from roseinfer.kernels.pdl import pdl_scope, pdl_supported

    if not pdl_supported():
        pytest.skip("PDL needs Hopper or later")
    g = torch.Generator(device="cuda").manual_seed(5)
    c, f16 = 768, torch.float16
    attn = (
        _rand(g, c, dtype=f16, device="cuda", scale=0.1) + 1.0, _rand(g, c, dtype=f16, device="cuda", scale=0.1),
        1e-5, _rand(g, 3 * c, c, dtype=f16, device="cuda", scale=c**-0.5), _rand(g, 3 * c, dtype=f16, device="cuda"),
    )  # fmt: skip
    proj = (
        _rand(g, c, 3 * c, dtype=f16, device="cuda", scale=(3 * c) ** -0.5),
        _rand(g, c, dtype=f16, device="cuda"),
    )
    mlp = _params(g, c, 4 * c, f16, "cuda")
    scratch = MlpScratch()
    x, delta = (_rand(g, 1, c, dtype=f16, device="cuda") for _ in range(2))

    def layer():
        s1, qkv = norm_gemv_triton(x, delta, *attn, pdl=True)
        a = gemv_triton(qkv, *proj, pdl=True)
        s2, m = fused_mlp_triton(s1, a, *mlp, scratch, pdl=True)
        s3, qkv2 = norm_gemv_triton(s2, m, *attn, pdl=True)
        return s1, qkv, a, s2, m, s3, qkv2

    with pdl_scope(True, early_release=early):
        graph, outs = captured(layer)
    for _ in range(4):
        x.copy_(_rand(g, 1, c, dtype=f16, device="cuda"))
        delta.copy_(_rand(g, 1, c, dtype=f16, device="cuda"))
        graph.replay()
        torch.cuda.synchronize()
        s1, qkv, a, s2, m, s3, qkv2 = outs
        torch.testing.assert_close(a.float(), gemv_reference(qkv, *proj).float(), atol=2e-2, rtol=2e-2)
        s2_ref, m_ref = fused_mlp_reference(s1, a, *mlp)
        assert torch.equal(s2, s2_ref)
        torch.testing.assert_close(m.float(), m_ref.float(), atol=2e-2, rtol=2e-2)
        s3_ref, qkv2_ref = norm_gemv_reference(s2, m, *attn)
        assert torch.equal(s3, s3_ref)
        torch.testing.assert_close(qkv2.float(), qkv2_ref.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
def test_fused_mlp_dispatch_at_one_row_inside_the_scope_only():
    from roseinfer.linears import fused_mlp_applies, small_batch_gemv

    fc = torch.nn.Linear(768, 3072, device="cuda", dtype=torch.float16)
    proj = torch.nn.Linear(3072, 768, device="cuda", dtype=torch.float16)
    shard = torch.nn.Linear(3072, 768, bias=False, device="cuda", dtype=torch.float16)  # a row-parallel shard
    one, two = torch.randn(1, 768, device="cuda").half(), torch.randn(2, 768, device="cuda").half()
    with small_batch_gemv(8, norm_prologue=True, fused_mlp=True):
        assert fused_mlp_applies(one, one, fc, proj)
        assert not fused_mlp_applies(two, two, fc, proj)
        assert not fused_mlp_applies(one, one, fc, shard)
    with small_batch_gemv(8, norm_prologue=True):
        assert not fused_mlp_applies(one, one, fc, proj)
    with small_batch_gemv(8, norm_prologue=False, fused_mlp=True):
        assert not fused_mlp_applies(one, one, fc, proj)
    assert not fused_mlp_applies(one, one, fc, proj)
