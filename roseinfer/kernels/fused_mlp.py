"""The whole MLP branch of a block at one row as one kernel: residual add + ln_2, c_fc + GELU, mlp_proj.

At batch 1 in a captured step each dependent kernel costs ~2 to 3 us of fixed cost (launch, the first loads'
latency, the tail) on top of its bytes, and the MLP was two of them (c_fc with the add + LayerNorm prologue, then
mlp_proj; `roseinfer.kernels.gemv`): 5.7 us a layer on the H100 for 4.7 MB of weights that move in 1.6 us at the
copy bandwidth (docs/BENCHMARKS.md, issue 27). Here the two GEMVs are two phases of one grid of P programs:
- every program issues all of its weight loads as it starts, both phases' (with PDL before it waits for the
  kernel before it, i.e. while that one still runs): phase 1's BLOCK_H rows of c_fc's weight [H, C] and phase 2's
  BLOCK_O rows of mlp_proj's weight [C, H], each row contiguous;
- phase 1: the add + LayerNorm prologue (as `norm_gemv_triton`: every program normalises the row, program 0
  writes the residual stream s), then the program's BLOCK_H hidden units, GELU applied and rounded to the
  activation dtype, stored to a per-block scratch row `hidden` [H];
- a grid barrier: each program adds one to a counter and waits until the launch's P arrivals are in. The
  counter is never reset: a launch's programs wait for the next multiple of P, so it stays right across layers
  and graph replays (int64: no wrap). All P programs must be resident at once, or the ones waiting would hold
  the SMs the others need: P is kept within what is resident whatever the registers (`resident_programs`);
- phase 2: each program reads the whole hidden row from L2 (bypassing L1, which may hold a previous launch's
  row) and writes its BLOCK_O outputs with mlp_proj's bias.
No atomics on the data, so the result is deterministic: the unfused kernels' numbers up to the order of each
fp32 sum. `fused_mlp_reference` is the plain-torch version the kernel is tested against.

Replaces `norm_gemv_triton(.., c_fc, gelu=True)` and `gemv_triton(.., mlp_proj)` at one row inside the captured
step (`roseinfer.linears.norm_mlp`; `GraphKernels.fused_mlp`, `--no-fused-mlp`).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from roseinfer.kernels.gemv import gemv_reference, norm_gemv_reference, triton_next_pow2


def fused_mlp_reference(x, delta, ln_weight, ln_bias, eps: float, fc_weight, fc_bias, proj_weight, proj_bias):
    """(s, out): s = x + delta, out = mlp_proj(gelu(c_fc(LayerNorm(s)))), each linear computed in fp32 and
    rounded to x's dtype, as the unfused kernels write them. x, delta [1, C] -> s [1, C], out [1, C]."""
    s, h = norm_gemv_reference(x, delta, ln_weight, ln_bias, eps, fc_weight, fc_bias, gelu=True)  # [1, H]
    return s, gemv_reference(h, proj_weight, proj_bias)


@dataclass(frozen=True)
class MlpConfig:
    block_o: int  # phase 2: output columns (rows of mlp_proj's weight) per program
    num_warps: int


def resident_programs(sm_count: int, num_warps: int) -> int:
    """Programs of `num_warps` warps that are resident at once on an otherwise idle device whatever registers the
    compiler gives them (at most 255 a thread, of an SM's 65,536; at most 64 warps and 32 programs an SM): the
    most a grid with a barrier may launch."""
    per_sm = min(32, 64 // num_warps, 65536 // (256 * 32 * num_warps))
    return sm_count * per_sm


def pick_config(c: int, h: int, sm_count: int) -> MlpConfig | None:
    """The smallest power-of-two BLOCK_O (most programs, most loads in flight) whose grid stays resident
    (`resident_programs`), with as few warps as hold each program's two weight tiles at <= 128 fp16 pairs a
    thread; None where no tile fits (the caller falls back to the two kernels)."""
    for block_o in (2, 4, 8, 16):
        p = -(-c // block_o)
        block_h = triton_next_pow2(-(-h // p))
        tile = block_h * triton_next_pow2(c) + block_o * triton_next_pow2(h)
        for num_warps in (2, 4, 8):
            if tile // (32 * num_warps) <= 256 and p <= resident_programs(sm_count, num_warps):
                return MlpConfig(block_o, num_warps)
    return None


def fused_mlp_fits(x, fc_weight, proj_weight) -> bool:
    """One row, C up to 4,096, the two weights contiguous and of matching shapes, and a config that fits."""
    c = x.shape[1]
    h = fc_weight.shape[0]
    return (
        x.shape[0] == 1
        and c <= 4096
        and fc_weight.shape == (h, c)
        and proj_weight.shape == (c, h)
        and fc_weight.is_contiguous()
        and proj_weight.is_contiguous()
        and pick_config(c, h, _sm_count(x.device)) is not None
    )


@functools.cache
def _sm_count_of(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _sm_count(device: torch.device) -> int:
    return _sm_count_of(device.index if device.index is not None else torch.cuda.current_device())


class MlpScratch:
    """What the kernel keeps between its phases, one per block: the hidden row [H] and the barrier's counter.
    Made outside a graph capture (the engine's warm-up forward runs first), so the zeroed counter is not a node."""

    def __init__(self) -> None:
        self._buffers: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}

    def get(self, h: int, dtype: torch.dtype, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        key = (h, dtype, device)
        if key not in self._buffers:
            hidden = torch.empty(h, dtype=dtype, device=device)  # [H]
            counter = torch.zeros(1, dtype=torch.int64, device=device)  # arrivals, all launches together
            self._buffers[key] = (hidden, counter)
        return self._buffers[key]


@functools.cache
def _get_kernel():
    """The kernel, compiled on first use: importing this module needs no Triton."""
    import triton
    import triton.language as tl

    from roseinfer.kernels.pdl import gdc_functions

    gdc_wait, gdc_launch_dependents = gdc_functions()

    @triton.jit
    def fused_mlp_kernel(
        x_ptr, d_ptr, s_ptr, lnw_ptr, lnb_ptr, eps, wfc_ptr, bfc_ptr, wpr_ptr, bpr_ptr, hid_ptr, cnt_ptr, out_ptr,
        C, H, P,
        BLOCK_C: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_HALL: tl.constexpr, BLOCK_O: tl.constexpr,
        PDL: tl.constexpr, EARLY: tl.constexpr,
    ):  # fmt: skip
        pid = tl.program_id(0)
        rc = tl.arange(0, BLOCK_C)  # [BC]: the model width
        rh = pid * BLOCK_H + tl.arange(0, BLOCK_H)  # [BH]: this program's hidden units
        ro = pid * BLOCK_O + tl.arange(0, BLOCK_O)  # [BO]: this program's outputs
        rk = tl.arange(0, BLOCK_HALL)  # [BHALL]: the whole hidden row
        cmask = rc < C
        hmask = rh < H
        omask = ro < C
        kmask = rk < H
        if PDL and EARLY:  # the next kernel may start now: it reads only weights before its wait
            gdc_launch_dependents()
        # every weight byte of both phases in flight at once, before the wait
        wfc = tl.load(
            wfc_ptr + rh.to(tl.int64)[:, None] * C + rc[None, :],
            mask=hmask[:, None] & cmask[None, :],
            other=0.0,
        )  # [BH, BC]
        wpr = tl.load(
            wpr_ptr + ro.to(tl.int64)[:, None] * H + rk[None, :],
            mask=omask[:, None] & kmask[None, :],
            other=0.0,
        )  # [BO, BHALL]
        lnw = tl.load(lnw_ptr + rc, mask=cmask, other=0.0).to(tl.float32)  # [BC]
        lnb = tl.load(lnb_ptr + rc, mask=cmask, other=0.0).to(tl.float32)
        bfc = tl.load(bfc_ptr + rh, mask=hmask, other=0.0).to(tl.float32)  # [BH]
        bpr = tl.load(bpr_ptr + ro, mask=omask, other=0.0).to(tl.float32)  # [BO]
        if PDL:  # x and delta are earlier kernels' outputs
            gdc_wait()
            if not EARLY:
                gdc_launch_dependents()
        # phase 1: s = x + delta (program 0 stores it), x1 = LayerNorm(s), hidden = gelu(x1 @ W_fc^T + b_fc)
        xr = tl.load(x_ptr + rc, mask=cmask, other=0.0)
        dr = tl.load(d_ptr + rc, mask=cmask, other=0.0)
        sr = (xr.to(tl.float32) + dr.to(tl.float32)).to(s_ptr.dtype.element_ty)  # rounded like torch's add
        tl.store(s_ptr + rc, sr, mask=cmask & (pid == 0))
        sf = sr.to(tl.float32)
        mean = tl.sum(sf, 0) / C
        diff = tl.where(cmask, sf - mean, 0.0)
        rstd = 1.0 / tl.sqrt(tl.sum(diff * diff, 0) / C + eps)
        x1 = (
            (diff * rstd * lnw + lnb).to(s_ptr.dtype.element_ty).to(tl.float32)
        )  # [BC], as the LN kernel rounds
        hv = tl.sum(wfc.to(tl.float32) * x1[None, :], axis=1) + bfc  # [BH]
        # GPT-2's gelu_new, as the GEMV's epilogue computes it
        u = 0.7978845608028654 * (hv + 0.044715 * hv * hv * hv)
        hv = 0.5 * hv * (2.0 - 2.0 / (tl.exp(2.0 * u) + 1.0))
        tl.store(hid_ptr + rh, hv.to(hid_ptr.dtype.element_ty), mask=hmask)
        # grid barrier: all of this program's stores issued (bar.sync), then one release-acquire arrival; wait for
        # the launch's P arrivals (the next multiple of P: the counter runs on across launches)
        tl.debug_barrier()
        arrived = tl.atomic_add(cnt_ptr, 1, sem="acq_rel")
        target = (arrived // P + 1) * P
        seen = arrived + 1
        while seen < target:
            seen = tl.atomic_add(cnt_ptr, 0, sem="acquire")
        tl.debug_barrier()
        # phase 2: out = hidden @ W_proj^T + b_proj for this program's outputs; the row from L2 (.cg), not L1
        hall = tl.load(hid_ptr + rk, mask=kmask, other=0.0, cache_modifier=".cg").to(tl.float32)  # [BHALL]
        out = tl.sum(wpr.to(tl.float32) * hall[None, :], axis=1) + bpr  # [BO]
        tl.store(out_ptr + ro, out.to(out_ptr.dtype.element_ty), mask=omask)

    return fused_mlp_kernel


def fused_mlp_triton(
    x, delta, ln_weight, ln_bias, eps: float, fc_weight, fc_bias, proj_weight, proj_bias, scratch: MlpScratch,
    pdl: bool | None = None, config: MlpConfig | None = None,
):  # fmt: skip
    """Same contract as `fused_mlp_reference` (callers check `fused_mlp_fits`), one kernel. scratch: the block's
    `MlpScratch` (one per block: a launch's hidden row must not be another launch's). pdl: as the current
    `roseinfer.kernels.pdl` scope says where None."""
    from roseinfer.kernels.pdl import pdl_early_release, pdl_enabled, pdl_supported

    c = x.shape[1]
    h = fc_weight.shape[0]
    assert fused_mlp_fits(x, fc_weight, proj_weight) and delta.shape == x.shape
    assert x.stride(1) == 1 and delta.stride(1) == 1 and fc_bias is not None and proj_bias is not None
    cfg = config or pick_config(c, h, _sm_count(x.device))
    p = -(-c // cfg.block_o)
    block_h = triton_next_pow2(-(-h // p))
    assert p * block_h >= h and p <= resident_programs(_sm_count(x.device), cfg.num_warps)
    hidden, counter = scratch.get(h, x.dtype, x.device)
    s = torch.empty_like(x)  # [1, C]
    out = torch.empty_like(x)  # [1, C]
    pdl = (pdl_enabled() if pdl is None else pdl) and pdl_supported()
    _get_kernel()[(p,)](
        x, delta, s, ln_weight, ln_bias, eps, fc_weight, fc_bias, proj_weight, proj_bias, hidden, counter, out,
        c, h, p,
        BLOCK_C=triton_next_pow2(c), BLOCK_H=block_h, BLOCK_HALL=triton_next_pow2(h), BLOCK_O=cfg.block_o,
        PDL=pdl, EARLY=pdl and pdl_early_release(), num_warps=cfg.num_warps, launch_pdl=pdl,
    )  # fmt: skip
    return s, out
