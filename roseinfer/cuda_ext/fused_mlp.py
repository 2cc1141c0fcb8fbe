"""The one-row MLP of a GPT-2 small block as one CUDA kernel (`fused_mlp.cu`), with regions inside it.

At decode batch 1 the Triton path runs a block's MLP as two dependent kernels (the norm GEMV for ln_2 + c_fc +
GELU, then the GEMV for mlp_proj; `roseinfer.kernels.gemv`). This kernel does it in one launch split over K: each
of 128 blocks loads its 24 rows of c_fc and of mlp_proj's transposed weight before it waits for the kernel in
front (PDL), normalises the row, computes its 24 g values and adds its share of every output column into a
float32 buffer with atomics. No block waits for another, so the kernel boundary it removes is not replaced by a
grid barrier (the first design's, which lost: docs/BENCHMARKS.md, issue 50). Its output is a split sum
(`roseinfer.kernels.split_sum`): float32 [SPLIT_ROWS, C], block b adding into row b % SPLIT_ROWS, whose rows the
kernel after it (the next layer's fused_attn, or its c_attn norm GEMV) sums as it reads them; the last layer's is
one row, for the lm_head's norm GEMV. The captured batch-1 step runs it by default (`GraphKernels.cuda_mlp`,
`--no-cuda-mlp` for the Triton path).

`MlpScratch` holds the output buffers, one per layer (`scratch.LayerScratch`): a launch adds into its layer's
buffer and zeroes the next layer's, whose last reader has finished by then; so each buffer is zero when its launch
starts, in every step.

Regions inside the kernel: with `MlpScratch(stamps=True)` thread 0 of every block writes %globaltimer at the
kernel's phase boundaries into the layer's stamp buffer (int64 ns; `MlpScratch.stamps[layer]` reads it by
block, [BLOCKS, NSTAMP]). `phase_ranges` turns one
launch's stamps into contiguous sub-ranges named with the engine's region names (`PHASES`:
`roseinfer.layer.mlp.wait`, `.norm`, `.up`, `.down`, `.sum`): phase k ends when the last block has passed stamp
k+1, so the ranges cover the kernel from its first block's start to its last block's end. `recorder.StampRecorder`
copies each captured step's stamps off the GPU without waiting for it and appends each launch's boundaries to the
stamps file (`stamps.py`), from which roseprof makes GPU sub-ranges of that launch in a profile.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from roseinfer.cuda_ext.scratch import LayerScratch, flat_stamps
from roseinfer.cuda_ext.stamps import phase_bounds as stamp_bounds
from roseinfer.cuda_ext.stamps import phase_ranges as stamp_ranges
from roseinfer.kernels.split_sum import SPLIT_ROWS, delta_rows, joined
from roseinfer.names import MLP_DOWN, MLP_NORM, MLP_SUM, MLP_UP, MLP_WAIT

NAME = "fused_mlp"
KERNEL = "fused_mlp_kernel"  # the CUDA function's name: the profilers' kernel names contain it
WIDTH = 768  # the one width built (at 1,024 the registers that hold both linears' rows would spill)
BLOCKS = 4 * WIDTH // (8 * 3)  # 128: 3 g rows per warp, 8 warps a block
NSTAMP = (
    6  # stamps per block: start, after the wait, after ln_2, after c_fc, after its share of mlp_proj, end
)
# (phase, region) between stamps k and k+1
PHASES = (
    ("weights and wait", MLP_WAIT),  # both linears' rows loaded, waiting for the kernel in front
    ("ln_2", MLP_NORM),  # the residual add and LayerNorm
    ("c_fc + gelu", MLP_UP),
    ("mlp_proj, this block's rows", MLP_DOWN),  # the block's share of every output column, in shared memory
    ("split-K sum", MLP_SUM),  # the shares added into the output (atomics)
)
# Test builds only: plant a spin of delay_ns in phase 1 (ln_2), 2 (c_fc), 3 (mlp_proj) or 4 (the sum)
DELAY_DEFINE = "FUSED_KERNEL_STAMP_DELAY"
# A measurement build without the stamp code (scripts/bench_cuda_mlp.py --bare: what stamps off cost)
NO_STAMPS_DEFINE = "FUSED_KERNEL_NO_STAMPS"
# griddepcontrol (the PDL wait and release) assembles for sm_90 and later only: older GPUs keep the Triton path
MIN_ARCH = (9, 0)


def load(test_build: bool = False, defines: tuple[str, ...] = ()):
    """The built extension (None where it is not built: `roseinfer.cuda_ext.why_not_built`); test_build: the
    build that can plant delays."""
    from roseinfer import cuda_ext

    module = cuda_ext.load(NAME, ((DELAY_DEFINE,) if test_build else ()) + tuple(defines), MIN_ARCH)
    # the split sum's rows, stated in common.cuh and in split_sum.py (the Triton reader follows the latter)
    if module is not None and module.SPLIT_ROWS != SPLIT_ROWS:
        raise RuntimeError(
            f"fused_mlp built with {module.SPLIT_ROWS} split rows, split_sum.py says {SPLIT_ROWS}"
        )
    return module


class MlpScratch(LayerScratch):
    """The kernel's output buffers, one per layer [n_layer, split_rows * C], and its stamps [n_layer, BLOCKS,
    NSTAMP] where `stamps` (`scratch.LayerScratch`). Each layer's output is a split sum of `split_rows` rows (the
    last layer's of one: `rows`)."""

    def __init__(self, n_layer: int, device, stamps: bool = False, split_rows: int = SPLIT_ROWS) -> None:
        if split_rows not in (1, SPLIT_ROWS):  # the rows the kernels are built for
            raise ValueError(f"split_rows must be 1 or {SPLIT_ROWS}, not {split_rows}")
        super().__init__("fused MLP", n_layer, WIDTH * split_rows, BLOCKS, NSTAMP, device, stamps)
        self.split_rows = split_rows

    def rows(self, layer: int) -> int:
        """The rows of layer `layer`'s output: `split_rows`, but one for the last layer, whose output the lm_head's
        norm GEMV reads in each of its thousands of programs (a split sum there would multiply those reads)."""
        return 1 if layer == self.bufs.shape[0] - 1 else self.split_rows


def fused_mlp_applies(x: torch.Tensor, delta: torch.Tensor, ln, c_fc, mlp_proj) -> bool:
    """Whether `fused_mlp` runs for x [1, C] float16, delta [1, C] (float16, or float32: fused_attn's output) or a
    split sum [R, C] (`roseinfer.kernels.split_sum`), this LayerNorm (`cuda_ext.layer_norm_fits`) and these linears
    (else the Triton path)."""
    from roseinfer import cuda_ext

    if not (x.is_cuda and x.dtype == torch.float16 and x.shape == (1, WIDTH) and x.is_contiguous()):
        return False
    if not (delta_rows(x, delta) and delta.dtype in (torch.float16, torch.float32) and delta.is_contiguous()):
        return False
    for lin, shape in ((c_fc, (4 * WIDTH, WIDTH)), (mlp_proj, (WIDTH, 4 * WIDTH))):
        if lin.bias is None or lin.weight.shape != shape or not lin.weight.is_contiguous():
            return False
    return cuda_ext.layer_norm_fits(ln, WIDTH) and load() is not None


def fused_mlp(x, delta, ln, c_fc, w_proj_t, b_proj, out, clear, stamps, pdl: bool = False, module=None,
              delay=(0, 0)):  # fmt: skip
    """(s [1, C] in x's dtype, out): s = x + delta (delta [1, C], or a float32 split sum [SPLIT_ROWS, C]), and
    mlp_proj(gelu_tanh(c_fc(ln(s)))) added into `out` (float32, C or SPLIT_ROWS C: one row or a split sum,
    `roseinfer.kernels.split_sum`; zero on entry); `clear` (float32, any length) zeroed for the next launch;
    w_proj_t: mlp_proj's weight transposed [4C, C]; stamps: int64 [NSTAMP, BLOCKS] (contiguous, as
    `MlpScratch.for_layer` gives it) or empty.
    pdl: launched as a programmatic dependent launch (the Triton kernels' protocol, `roseinfer.kernels.pdl`).
    module: the built extension (default `load()`; a test build for planted delays); delay: (phase, ns) in a test
    build."""
    from roseinfer import cuda_ext

    module = module or load()
    s = torch.empty_like(x)  # [1, C]
    fold_w, fold_b = cuda_ext.ln_fold(ln, c_fc)  # [4C] each: ln_2 folded into c_fc, its bias in fold_b
    module.fused_mlp(
        x, delta, ln.weight, ln.bias, ln.eps, c_fc.weight, fold_w, fold_b, w_proj_t, b_proj,
        s, out, clear, flat_stamps(stamps, NSTAMP, BLOCKS), pdl, delay[0], delay[1],
    )  # fmt: skip
    return s, out


def block_mlp(x, delta, block, layer: int, scratch: MlpScratch, pdl: bool = False, module=None, delay=(0, 0)):
    """A GPT-2 block's MLP as `fused_mlp` into layer `layer`'s buffer of `scratch`: (s [1, C], out [R, C] float32,
    a split sum of `scratch.rows(layer)` rows, valid until the same layer's next launch). The block keeps
    mlp_proj's weight transposed ([4C, C], made at its first call: the step's warm-up, before capture)."""
    w_proj_t = getattr(block, "mlp_proj_t", None)
    if w_proj_t is None:
        w_proj_t = block.mlp_proj_t = block.mlp_proj.weight.detach().t().contiguous()  # [4C, C]
    buf, clear, stamps = scratch.for_layer(layer)
    out = buf[: scratch.rows(layer) * WIDTH]  # the layer's rows; clear: all of the next layer's buffer
    scratch.launched = True
    s, out = fused_mlp(
        x,
        delta,
        block.ln_2,
        block.c_fc,
        w_proj_t,
        block.mlp_proj.bias,
        out,
        clear,
        stamps,
        pdl,
        module,
        delay,
    )
    return s, out.view(-1, WIDTH)


def fused_mlp_reference(x, delta, ln, c_fc, mlp_proj):
    """(s, out) in torch, rounded where the kernel rounds (s and g in x's dtype; out float32; the LayerNorm's output
    float32, as the kernel folds it into c_fc's dot products and never stores it: `cuda_ext.ln_fold`); delta [1, C]
    or a split sum."""
    s = (x.float() + joined(x, delta).float()).to(x.dtype)
    h = F.layer_norm(s.float(), (s.shape[-1],), ln.weight.float(), ln.bias.float(), ln.eps)  # [1, C] float32
    g = F.gelu(F.linear(h.float(), c_fc.weight.float(), c_fc.bias.float()), approximate="tanh").to(x.dtype)
    return s, F.linear(g.float(), mlp_proj.weight.float(), mlp_proj.bias.float())


def phase_ranges(stamps) -> list[tuple[str, str, int, int]]:
    """One launch's stamps [blocks, NSTAMP] (a tensor or nested lists of ns) -> its phases' contiguous sub-ranges
    (`stamps.phase_ranges`)."""
    return stamp_ranges(stamps, PHASES)


def phase_bounds(stamps) -> list[int]:
    """One launch's stamps [blocks, NSTAMP] -> the NSTAMP phase boundaries (`stamps.phase_bounds`)."""
    return stamp_bounds(stamps, NSTAMP)


def record_stamps(log, stamps) -> None:
    """Append one launch's stamps [BLOCKS, NSTAMP] (after it has run: a device tensor is read, so this waits) to
    a stamps file (`roseinfer.cuda_ext.stamps.StampLog`), once per launch, in launch order."""
    log.record(
        KERNEL,
        [region for _, region in PHASES],
        phase_bounds(stamps.cpu() if hasattr(stamps, "cpu") else stamps),
    )
