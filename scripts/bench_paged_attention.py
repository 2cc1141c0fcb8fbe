"""The Triton paged-attention decode kernel against the HBM: achieved bandwidth at workload (a)'s shapes.

    python scripts/bench_paged_attention.py --batch 64 --past 128,256,512

Random fp16 K/V (GPT-2 small: 12 heads of 64) in a pool whose blocks are handed out in shuffled order, block
size 64; 20 calls are captured in a CUDA graph and the replays timed with CUDA events (median of 20), for
several num_warps and loop pipelining depths (`num_stages`) (`roseinfer.bench.timing.graph_us`). Bandwidth counts the
K and V bytes each call must read (the past tokens of every sequence), so it is comparable with the measured
copy bandwidth of `roseinfer.bench.roofline`.
"""

import argparse
import functools

import torch

from roseinfer.bench.roofline import copy_bandwidth
from roseinfer.bench.timing import graph_us
from roseinfer.kernels.paged_attention import paged_decode_attention_triton


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--past", default="128,256,512")
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--block", type=int, default=64)
    a = p.parse_args()
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(0)
    bw = copy_bandwidth(dev)
    print(f"{torch.cuda.get_device_name()}, copy bandwidth {bw / 1e9:.0f} GB/s, batch {a.batch}, fp16")
    print("| past tokens | num_warps | num_stages | us per call | GB/s | share of copy bandwidth |")
    print("|---|---|---|---|---|---|")
    for past in [int(x) for x in a.past.split(",")]:
        per_seq = -(-past // a.block)
        n = a.batch * per_seq + 1
        shape = (n, a.heads, a.block, a.head_dim)
        kc = torch.randn(shape, generator=g, device=dev, dtype=torch.float16)
        vc = torch.randn(shape, generator=g, device=dev, dtype=torch.float16)
        table = torch.randperm(n - 1, generator=g, device=dev)[: a.batch * per_seq].view(a.batch, per_seq)
        lens = torch.full((a.batch,), past, device=dev)
        q, k, v = (
            torch.randn(a.batch, a.heads, a.head_dim, generator=g, device=dev, dtype=torch.float16)
            for _ in range(3)
        )
        nbytes = 2 * a.batch * past * a.heads * a.head_dim * 2
        for warps, stages in ((1, 1), (2, 1), (4, 1), (8, 1), (4, 2), (4, 3), (4, 4), (2, 3), (8, 3)):
            call = functools.partial(
                paged_decode_attention_triton, q, k, v, kc, vc, table, lens, 0.125, num_warps=warps,
                num_stages=stages,
            )  # fmt: skip
            t = graph_us(call, reps=20) / 1e6
            print(
                f"| {past} | {warps} | {stages} | {t * 1e6:.1f} | {nbytes / t / 1e9:.0f} | {nbytes / t / bw:.0%} |"
            )


if __name__ == "__main__":
    main()
