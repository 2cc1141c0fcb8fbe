"""KV append on the GPU: the torch path against each Triton kernel, median of many timed repetitions (CUDA events).

    python scripts/bench_kv_append.py --batch-sizes 128,256,512,1024,2048

Two timings per variant: "launch" times one call from Python between two events (what an eager step pays,
launch overhead included); "graph" replays 20 calls captured in a CUDA graph and divides by 20 (what the GPU
spends on it, as inside a captured decode step).
"""

import argparse
from functools import partial

import torch

from roseinfer.bench.timing import graph_us, time_us
from roseinfer.kernels.kv_append import (
    MODE_FULL_BATCH,
    MODE_GENERAL,
    MODE_IDENTITY,
    kv_append_reference,
    kv_append_triton,
)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch-sizes", default="128,256,512,1024,2048")
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--reps", type=int, default=200)
    args = ap.parse_args()
    dt = torch.float16
    print(
        f"{torch.cuda.get_device_name()}, fp16, H={args.heads}, D={args.head_dim}, block 64, median of {args.reps} (µs)"
    )
    print(
        "| batch | timing | torch index_put | triton general | triton identity | triton full-batch | best speedup |"
    )
    print("|---|---|---|---|---|---|---|")
    for b in [int(x) for x in args.batch_sizes.split(",")]:
        n = 2 * b
        kc = torch.randn(n, args.heads, 64, args.head_dim, dtype=dt, device="cuda")
        vc = torch.randn_like(kc)
        k = torch.randn(b, args.heads, args.head_dim, dtype=dt, device="cuda")
        v = torch.randn_like(k)
        block = torch.randperm(n, device="cuda")[:b]
        pos = torch.randint(0, 64, (b,), device="cuda")
        idx = torch.arange(b, device="cuda")
        variants = [
            partial(kv_append_reference, kc, vc, k, v, block, pos),
            partial(kv_append_triton, kc, vc, k, v, block, pos, idx, mode=MODE_GENERAL),
            partial(kv_append_triton, kc, vc, k, v, block, pos, mode=MODE_IDENTITY),
            partial(kv_append_triton, kc, vc, k, v, block, pos, mode=MODE_FULL_BATCH),
        ]
        for label, timer in (("launch", time_us), ("graph", graph_us)):
            t = [timer(fn, args.reps) for fn in variants]
            print(
                f"| {b} | {label} | " + " | ".join(f"{x:.1f}" for x in t) + f" | {t[0] / min(t[1:]):.1f}x |"
            )


if __name__ == "__main__":
    main()
