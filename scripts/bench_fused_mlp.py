"""The one-row MLP branch as one kernel (`roseinfer.kernels.fused_mlp`) against the two GEMV kernels it replaces.

    python scripts/bench_fused_mlp.py --model gpt2 [--sweep]

A chain of MLP branches as the captured batch-1 step runs them (each reads the one before's residual stream and
output, PDL launches with the early release of `roseinfer.kernels.pdl`), on as many copies of the weights as
exceed the L2 cache twice (a decode step's 12 layers do not stay in L2), inside one CUDA graph: µs per branch,
median of 20 replays. GB/s counts the weight bytes; % is against the measured device-to-device copy bandwidth.
--sweep also times the kernel's other tiles (outputs per program, warps) that keep its grid resident.
"""

import argparse

import torch

from roseinfer.bench.roofline import copy_bandwidth
from roseinfer.config import BUILTIN_MODELS
from roseinfer.kernels.fused_mlp import (
    MlpConfig,
    MlpScratch,
    fused_mlp_triton,
    pick_config,
    resident_programs,
)
from roseinfer.kernels.gemv import gemv_triton, norm_gemv_triton
from roseinfer.kernels.pdl import pdl_scope, pdl_supported

L2_BYTES = 50 * 2**20


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="gpt2")
    p.add_argument("--sweep", action="store_true")
    a = p.parse_args()
    from bench_gemv import graph_time_us  # scripts/ is on the path of a script run from it

    c = BUILTIN_MODELS[a.model].n_embd
    h = 4 * c
    f16 = torch.float16
    bytes_per_mlp = 2 * h * c * 2
    copies = -(-2 * L2_BYTES // bytes_per_mlp)
    layers = [
        dict(
            ln=(torch.rand(c, device="cuda", dtype=f16) + 0.5, torch.randn(c, device="cuda", dtype=f16) * 0.1),
            fc=(torch.randn(h, c, device="cuda", dtype=f16) * c**-0.5, torch.randn(h, device="cuda", dtype=f16) * 0.1),
            proj=(torch.randn(c, h, device="cuda", dtype=f16) * h**-0.5, torch.randn(c, device="cuda", dtype=f16)),
            scratch=MlpScratch(),
        )
        for _ in range(copies)
    ]  # fmt: skip
    x0, d0 = torch.randn(1, c, device="cuda", dtype=f16), torch.randn(1, c, device="cuda", dtype=f16)
    sms = torch.cuda.get_device_properties(0).multi_processor_count

    def two_kernels(i):
        layer = layers[i]
        s, hid = norm_gemv_triton(x0, d0, *layer["ln"], 1e-5, *layer["fc"], gelu=True)
        return s, gemv_triton(hid, *layer["proj"])

    def fused(cfg):
        def run(i):
            layer = layers[i]
            return fused_mlp_triton(
                x0, d0, *layer["ln"], 1e-5, *layer["fc"], *layer["proj"], layer["scratch"], config=cfg
            )

        return run

    bw = copy_bandwidth(torch.device("cuda"))
    picked = pick_config(c, h, sms)
    variants = [("two GEMV kernels (norm_gemv c_fc + gemv mlp_proj)", two_kernels)]
    variants.append((f"fused, picked {picked}", fused(picked)))
    if a.sweep:
        for bo in (2, 4, 8, 16):
            for warps in (2, 4, 8, 16):
                cfg = MlpConfig(bo, warps)
                if cfg != picked and -(-c // bo) <= resident_programs(sms, warps):
                    variants.append((f"fused, {cfg}", fused(cfg)))
    print(f"{a.model}: C={c}, H={h}, {bytes_per_mlp / 1e6:.2f} MB a branch, {copies} copies, {sms} SMs, "
          f"copy bandwidth {bw / 1e9:.0f} GB/s, PDL {pdl_supported()}")  # fmt: skip
    with pdl_scope(True, early_release=True):
        for name, fn in variants:
            us = graph_time_us(fn, copies)
            gbs = bytes_per_mlp / us / 1e3
            print(f"  {name:<60} {us:7.2f} us  {gbs:6.0f} GB/s  {100 * gbs * 1e9 / bw:5.1f}%")


if __name__ == "__main__":
    main()
