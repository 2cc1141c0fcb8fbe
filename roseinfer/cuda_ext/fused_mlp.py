"""The one-row MLP of a GPT-2 small block as one CUDA kernel (`fused_mlp.cu`), with regions inside it.

At decode batch 1 the Triton path runs a block's MLP as two dependent kernels (the norm GEMV for ln_2 + c_fc +
GELU, then the GEMV for mlp_proj; `roseinfer.kernels.gemv`). This kernel does the same in one launch: every
block of a one-block-per-SM grid loads its rows of both weights before it waits for the kernel in front (PDL),
normalises the row, computes its c_fc rows, meets the others at a grid barrier and computes its mlp_proj row.
`fused_mlp_applies` says where it can run (CUDA, float16/bfloat16, one row, 768 wide, the extension built, at
least 128 SMs).

The engine does not run it: on an H200 it made the batch-1 step slower (TPOT 0.225 against 0.200 ms, 7.8 against
6.1 us per MLP in a captured chain; docs/BENCHMARKS.md, issue 50). Its grid barrier costs what the kernel boundary
it removes costs under PDL (~2 us), and one 256-thread, 133-register block per SM leaves the next kernels less
room to load their weights early. It stays as the toolchain's first kernel, measured by
scripts/bench_cuda_mlp.py, and as the kernel that carries region stamps.

Regions inside the kernel: with `MlpState(stamps=True)` thread 0 of every block writes %globaltimer at the
kernel's phase boundaries into `state.stamps` [blocks, NSTAMP] (int64 ns). `phase_ranges` turns one launch's
stamps into contiguous sub-ranges named with the engine's region names (`PHASES`: `roseinfer.layer.mlp.wait`, `.norm`,
`.up`, `.barrier`, `.down`): phase k ends when the last block has passed stamp k+1, so the ranges cover the kernel
from its first block's start to its last block's end. `record_stamps` appends a launch's boundaries to the stamps
file (`stamps.py`), from which roseprof makes GPU sub-ranges of that launch in a profile.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from roseinfer.names import MLP_BARRIER, MLP_DOWN, MLP_NORM, MLP_UP, MLP_WAIT

NAME = "fused_mlp"
KERNEL = "fused_mlp_kernel"  # the CUDA function's name: the profilers' kernel names contain it
WIDTH = 768  # the one width built (at 1,024 its registers spill)
NSTAMP = 6  # stamps per block: start, after the wait, after ln_2, after c_fc, after the barrier, end
MIN_SMS = 128  # one block per SM, 8 warps a block: 3 c_fc rows and 1 mlp_proj row per warp need >= 128 blocks
# (phase, region) between stamps k and k+1
PHASES = (
    ("weights and wait", MLP_WAIT),  # both linears' weights loaded, waiting for the kernel in front
    ("ln_2", MLP_NORM),  # the residual add and LayerNorm
    ("c_fc + gelu", MLP_UP),
    ("grid barrier", MLP_BARRIER),  # every block's c_fc rows written; g read into shared memory
    ("mlp_proj", MLP_DOWN),
)
# Test builds only: plant a spin of delay_ns in phase 1 (ln_2), 2 (c_fc) or 4 (mlp_proj)
DELAY_DEFINE = "FUSED_MLP_STAMP_DELAY"
# A measurement build without the stamp code (scripts/bench_cuda_mlp.py --bare: what stamps off cost)
NO_STAMPS_DEFINE = "FUSED_MLP_NO_STAMPS"


def load(test_build: bool = False, defines: tuple[str, ...] = ()):
    """The built extension (None where it is not built: `roseinfer.cuda_ext.why_not_built`); test_build: the
    build that can plant delays."""
    from roseinfer import cuda_ext

    return cuda_ext.load(NAME, ((DELAY_DEFINE,) if test_build else ()) + tuple(defines))


class MlpState:
    """A layer's kernel state: its grid barrier (two int32 words, zeros, left reusable by every launch) and,
    with stamps, its stamp buffer [blocks, NSTAMP] int64 (the last launch's). Made once per layer before the
    step is captured."""

    def __init__(self, device: torch.device, stamps: bool = False, blocks: int | None = None) -> None:
        self.blocks = blocks or torch.cuda.get_device_properties(device).multi_processor_count
        self.barrier = torch.zeros(2, dtype=torch.int32, device=device)
        self.stamps = torch.zeros(
            (self.blocks, NSTAMP) if stamps else (0,), dtype=torch.int64, device=device
        )  # [blocks, NSTAMP] or empty (regions off)


def fused_mlp_applies(x: torch.Tensor, delta: torch.Tensor, c_fc, mlp_proj) -> bool:
    """Whether `fused_mlp` runs for x, delta [1, C] and these linears (else the Triton path)."""
    if not (x.is_cuda and x.dtype in (torch.float16, torch.bfloat16) and x.shape == (1, WIDTH)):
        return False
    if not (delta.shape == x.shape and x.is_contiguous() and delta.is_contiguous()):
        return False
    for lin, shape in ((c_fc, (4 * WIDTH, WIDTH)), (mlp_proj, (WIDTH, 4 * WIDTH))):
        if lin.bias is None or lin.weight.shape != shape or not lin.weight.is_contiguous():
            return False
    if torch.cuda.get_device_properties(x.device).multi_processor_count < MIN_SMS:
        return False
    return load() is not None


def fused_mlp(x, delta, ln, c_fc, mlp_proj, state: MlpState, pdl: bool = False, module=None, delay=(0, 0)):
    """(s, out): s = x + delta [1, C], out = mlp_proj(gelu_tanh(c_fc(ln(s)))) [1, C], one kernel. pdl: launched as
    a programmatic dependent launch (the Triton kernels' protocol, `roseinfer.kernels.pdl`). module: the built
    extension (default `load()`; a test build for planted delays); delay: (phase, ns) in a test build."""
    module = module or load()
    s = torch.empty_like(x)  # [1, C]
    out = torch.empty_like(x)  # [1, C]
    g = torch.empty(4 * x.shape[1], dtype=x.dtype, device=x.device)  # [4C] c_fc's output, read by every block
    module.fused_mlp(
        x, delta, ln.weight, ln.bias, ln.eps, c_fc.weight, c_fc.bias, mlp_proj.weight, mlp_proj.bias,
        s, g, out, state.barrier, state.stamps, state.blocks, pdl, delay[0], delay[1],
    )  # fmt: skip
    return s, out


def fused_mlp_reference(x, delta, ln, c_fc, mlp_proj):
    """The same in torch, rounded where the kernel rounds (s, LayerNorm's output and g in x's dtype)."""
    s = x + delta
    h = F.layer_norm(s.float(), (s.shape[-1],), ln.weight.float(), ln.bias.float(), ln.eps).to(x.dtype)
    g = F.gelu(F.linear(h.float(), c_fc.weight.float(), c_fc.bias.float()), approximate="tanh").to(x.dtype)
    return s, F.linear(g.float(), mlp_proj.weight.float(), mlp_proj.bias.float()).to(x.dtype)


def phase_ranges(stamps) -> list[tuple[str, str, int, int]]:
    """One launch's stamps [blocks, NSTAMP] (a tensor or nested lists of ns) -> [(phase, region, start_ns,
    end_ns)] in order: the first from the earliest block's start, each boundary where the last block passed it,
    so the ranges are contiguous and cover first start to last end."""
    bounds = phase_bounds(stamps)
    return [(phase, region, bounds[k], bounds[k + 1]) for k, (phase, region) in enumerate(PHASES)]


def phase_bounds(stamps) -> list[int]:
    """One launch's stamps [blocks, NSTAMP] -> the NSTAMP phase boundaries (ns, the GPU's clock): the earliest
    block's start, then each boundary where the last block passed it."""
    rows = stamps.tolist() if hasattr(stamps, "tolist") else stamps
    if not rows or any(len(r) != NSTAMP for r in rows):
        raise ValueError(f"stamps must be [blocks, {NSTAMP}]")
    return [min(r[0] for r in rows)] + [max(r[k] for r in rows) for k in range(1, NSTAMP)]


def record_stamps(log, state: MlpState) -> None:
    """Append the last launch of `state` to a stamps file (`roseinfer.cuda_ext.stamps.StampLog`): after the
    launch has run (this reads the device buffer, so it waits for it), once per launch, in launch order."""
    log.record(KERNEL, [region for _, region in PHASES], phase_bounds(state.stamps.cpu()))
