"""What a GEMM shape the process has not met costs the host (issue 49's GPU truth: a 90-token prefill whose
forward took 20.7 ms of host CPU time, 4x what a 1,675-token one took, its watchdog stacks in `F.linear`;
docs/BENCHMARKS.md, session 23).

GPT-2 small's four linears of one layer in float16 (`roseinfer.linears.linear` as the prefill calls them: F.linear
with bias, and cuBLASLt's GELU epilogue for c_fc), at row counts M the process has not met and again at the same M,
each call's host CPU time (the calling thread's), per arm, the arms interleaved M by M in one process:

    default     torch's choice
    cublas      torch.backends.cuda.preferred_blas_library("cublas")
    padded-64   M rounded up to a multiple of 64 (the pad's copy included), every such M met once before

    python scripts/probe_gemm_shapes.py [--rows 400] [--max-m 2048]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

import torch
import torch.nn.functional as F

_cpu = time.thread_time_ns


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=400, help="new row counts per arm")
    p.add_argument("--max-m", type=int, default=2048)
    args = p.parse_args()
    dev, dt = "cuda", torch.float16
    # name: (N, K, gelu) of GPT-2 small's linears
    shapes = {"c_attn": (2304, 768, False), "attn_proj": (768, 768, False), "c_fc": (3072, 768, True),
              "mlp_proj": (768, 3072, False)}  # fmt: skip
    weights = {k: (torch.randn(n, kk, device=dev, dtype=dt) * 0.02, torch.zeros(n, device=dev, dtype=dt), g)
               for k, (n, kk, g) in shapes.items()}  # fmt: skip
    inputs = {k: torch.randn(args.max_m, k, device=dev, dtype=dt) for k in (768, 3072)}  # [M, K]

    def layer(m: int, pad_to: int = 0) -> None:
        for w, b, gelu in weights.values():
            x = inputs[w.shape[1]][:m]  # [M, K]
            if pad_to:
                x = F.pad(x, (0, 0, 0, pad_to - m))  # [M_pad, K]
            if gelu:
                torch._addmm_activation(b, x, w.t(), use_gelu=True)
            else:
                F.linear(x, w, b)

    rng = random.Random(0)
    ms = rng.sample(range(17, args.max_m - 64), 3 * args.rows)  # never met before, disjoint between the arms
    arms = ("default", "cublas", "padded-64")
    for m in range(64, args.max_m + 1, 64):  # the padded arm's shapes, met once (a server's warm-up)
        layer(m)
    torch.cuda.synchronize()
    new: dict[str, list[float]] = {a: [] for a in arms}
    seen: dict[str, list[float]] = {a: [] for a in arms}
    for i in range(args.rows):
        for j, arm in enumerate(arms):
            m = ms[3 * i + j]
            torch.backends.cuda.preferred_blas_library("cublas" if arm == "cublas" else "default")
            pad = -(-m // 64) * 64 if arm == "padded-64" else 0
            for store in (new, seen):
                c0 = _cpu()
                layer(m, pad)
                store[arm].append((_cpu() - c0) / 1e3)  # µs
            if i % 16 == 0:
                torch.cuda.synchronize()
    torch.backends.cuda.preferred_blas_library("default")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, preferred blas "
          f"{torch.backends.cuda.preferred_blas_library()}; host CPU µs for one layer's 4 linears")  # fmt: skip
    for arm in arms:
        for label, xs in (("new M", new[arm]), ("same M again", seen[arm])):
            xs = sorted(xs)
            p90 = xs[min(len(xs) - 1, int(0.9 * len(xs)))]
            print(f"{arm:10s} {label:13s} p50 {statistics.median(xs):8.1f}  p90 {p90:8.1f}  "
                  f"max {xs[-1]:8.1f}  (x12 layers p50: {12 * statistics.median(xs) / 1e3:.2f} ms)")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
