"""Residual add + LayerNorm in one kernel: s = x + delta, y = LayerNorm(s); returns (s, y).

GPT-2 ends every attention and MLP branch with `x = x + branch(x)` followed by the next LayerNorm (ln_2, the next
block's ln_1, or ln_f). Done by torch that is two kernels, each a few microseconds at decode sizes; on the H100
they were 120 of a graph step's 856 us (25 LayerNorms, 25 adds; docs/BENCHMARKS.md). One Triton program per row
reads x and delta once and writes both results.

The sum is rounded to the activation dtype before it is normalised, as torch's separate add then LayerNorm
does, so the residual stream is the same tensor either way. `add_layer_norm_reference` is the plain-torch
version the kernel is tested against (and what runs off CUDA).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from roseinfer.kernels.split_sum import SplitK


def add_layer_norm_reference(x, delta, weight, bias, eps: float):
    """x, delta [T, C] (or a `SplitK` of it); weight, bias [C]. Returns (x + delta, LayerNorm(x + delta)), both
    [T, C]."""
    s = x + (delta.joined() if isinstance(delta, SplitK) else delta)
    return s, F.layer_norm(s, (s.shape[-1],), weight, bias, eps)


@functools.cache
def _get_kernel():
    """The kernel, compiled on first use: importing this module needs no Triton (the CPU engine never calls it)."""
    import triton
    import triton.language as tl

    from roseinfer.kernels.pdl import gdc_functions

    gdc_wait, gdc_launch_dependents = gdc_functions()

    @triton.jit
    def add_layer_norm_kernel(
        x_ptr, d_ptr, db_ptr, w_ptr, b_ptr, s_ptr, y_ptr,
        stride_x, stride_d, stride_dk, stride_s, stride_y, C, eps,
        BLOCK_C: tl.constexpr, SPLITS: tl.constexpr, PDL: tl.constexpr, EARLY: tl.constexpr,
    ):  # fmt: skip
        row = tl.program_id(0).to(tl.int64)
        c = tl.arange(0, BLOCK_C)
        mask = c < C
        w = tl.load(w_ptr + c, mask=mask, other=0.0).to(tl.float32)  # parameters: not written by the step
        b = tl.load(b_ptr + c, mask=mask, other=0.0).to(tl.float32)
        if SPLITS > 0:  # delta is a K split's parts (stride_dk apart) and the linear's bias, a parameter too
            d = tl.load(db_ptr + c, mask=mask, other=0.0).to(tl.float32)
        if PDL:  # roseinfer.kernels.pdl: x and delta are earlier kernels' outputs
            # `pdl_layer_norm_early`: the next kernel launches (and loads its weights) during this wait
            if EARLY:
                gdc_launch_dependents()
            gdc_wait()
            if not EARLY:
                gdc_launch_dependents()
        x = tl.load(x_ptr + row * stride_x + c, mask=mask, other=0.0)
        if SPLITS > 0:
            for k in tl.static_range(SPLITS):
                d += tl.load(d_ptr + k * stride_dk + row * stride_d + c, mask=mask, other=0.0)
            d = d.to(s_ptr.dtype.element_ty)  # rounded as the GEMM's own output would be
        else:
            d = tl.load(d_ptr + row * stride_d + c, mask=mask, other=0.0)
        s = (x.to(tl.float32) + d.to(tl.float32)).to(s_ptr.dtype.element_ty)  # rounded like torch's add
        tl.store(s_ptr + row * stride_s + c, s, mask=mask)
        sf = s.to(tl.float32)
        mean = tl.sum(sf, 0) / C
        diff = tl.where(mask, sf - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(diff * diff, 0) / C + eps)
        y = diff * rstd * w + b
        tl.store(y_ptr + row * stride_y + c, y.to(y_ptr.dtype.element_ty), mask=mask)

    return add_layer_norm_kernel


def add_layer_norm_triton(x, delta, weight, bias, eps: float):
    """Same contract as the reference; rows may be strided, the last dimension must be contiguous. delta may be a
    K-split linear's output (`roseinfer.kernels.split_sum.SplitK`: its parts and bias added as they are read).
    Launched with PDL inside `roseinfer.kernels.pdl.pdl_scope`; with its `layer_norm_early` a row is one warp
    (its sums by shuffles alone, no shared memory) and the kernel releases the next before its wait."""
    import triton

    from roseinfer.kernels.pdl import pdl_enabled, pdl_layer_norm_early

    t, c = x.shape
    if isinstance(delta, SplitK):
        d, d_bias, splits = delta.parts, delta.bias, delta.parts.shape[0]  # [S, T, C], [C]
        assert d.shape[1:] == x.shape and d.dtype == torch.float32 and d_bias.is_contiguous() and splits > 0
        stride_dk = d.stride(0)
    else:
        d, d_bias, splits, stride_dk = delta, bias, 0, 0  # (d_bias unread)
        assert delta.shape == x.shape
    assert x.stride(1) == 1 and d.stride(-1) == 1
    assert weight.is_contiguous() and bias.is_contiguous()
    s = torch.empty_like(x)  # [T, C]
    y = torch.empty_like(x)  # [T, C]
    if t == 0:
        return s, y
    block_c = triton.next_power_of_2(c)
    early = pdl_layer_norm_early() and block_c <= 1024  # one warp holds 32 of a row's floats a lane at most
    _get_kernel()[(t,)](
        x, d, d_bias, weight, bias, s, y, x.stride(0), d.stride(-2), stride_dk, s.stride(0), y.stride(0), c, eps,
        BLOCK_C=block_c, SPLITS=splits, PDL=pdl_enabled(), EARLY=early,
        num_warps=1 if early else 4 if block_c <= 1024 else 8, launch_pdl=pdl_enabled(),
    )  # fmt: skip
    return s, y
