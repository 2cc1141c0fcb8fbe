"""The Triton paged-attention decode kernel against the HBM, tile by tile (`AttentionTile`: past tokens an
iteration, warps, pipeline stages).

    python scripts/bench_paged_attention.py --batch 512,64,8 --past 1,64,65,128,256,512,1000

Random fp16 K/V (GPT-2 small: 12 heads of 64) in a pool whose blocks (64 tokens) are handed out in shuffled
order, every sequence at the same past length, the new token appended as in the engine. 20 or more calls are
captured in a CUDA graph and the replay timed with CUDA events (median of 10; `roseinfer.bench.timing.graph_us`);
the calls rotate over copies of the cache that add up to at least 256 MB, so every call reads its K/V from DRAM
as a decode step does (a layer's past is read once a step), not from the 50 MB L2. Bandwidth counts the K and V
bytes each call must read, comparable with the copy bandwidth measured in the same process
(`roseinfer.bench.roofline`). The column the engine picks (`pick_attention_tile`) is marked with a star.

--splits adds columns of the split kernel (`roseinfer.kernels.split_attention`, flash-decoding: the past cut into
slices of whole blocks, a program each, merged by the last one) at other sizes than the engine gives it, e.g.
`--splits 5x4x2,3x4x2` (slices x warps x stages).

--cuda adds columns of the CUDA kernel (`roseinfer.cuda_ext.paged_attn`: whole 64-token tiles by bulk copy, four
warps a (sequence, head)) at each number of tiles in flight, e.g. `--cuda 1,2,3`.

--calls-only calls each tile twice on one copy and times nothing: the launches for Nsight Compute, e.g.
    python -m roseprof ncu --kernel paged_decode --launch-count 2 -- \
        python scripts/bench_paged_attention.py --batch 512 --past 65 --tiles 16x1x2 --calls-only
"""

import argparse
import functools

import torch

from roseinfer.bench.roofline import copy_bandwidth
from roseinfer.bench.timing import graph_us
from roseinfer.cuda_ext.paged_attn import paged_decode_attention_cuda
from roseinfer.kernels.paged_attention import (
    AttentionTile,
    paged_decode_attention_triton,
    pick_attention_tile,
)
from roseinfer.kernels.split_attention import split_decode_attention_triton

ROTATE_BYTES = 256 << 20


def parse_tile(text: str) -> AttentionTile:
    """'16x1x2': 16 tokens an iteration, 1 warp, 2 stages."""
    chunk, warps, stages = (int(x) for x in text.split("x"))
    return AttentionTile(chunk, warps, stages)


def make_inputs(batch: int, past: int, heads: int, head_dim: int, block: int, seed: int):
    """(q, k_new, v_new, k_cache, v_cache, table, past_lens) of one call; the table leaves room for the new token."""
    dev = torch.device("cuda")
    g = torch.Generator(device=dev).manual_seed(seed)
    per_seq = -(-(past + 1) // block)
    n = batch * per_seq + 1
    shape = (n, heads, block, head_dim)
    kc = torch.randn(shape, generator=g, device=dev, dtype=torch.float16)
    vc = torch.randn(shape, generator=g, device=dev, dtype=torch.float16)
    table = torch.randperm(n - 1, generator=g, device=dev)[: batch * per_seq].view(batch, per_seq).int()
    lens = torch.full((batch,), past, device=dev, dtype=torch.int32)
    q, k, v = (
        torch.randn(batch, heads, head_dim, generator=g, device=dev, dtype=torch.float16) for _ in range(3)
    )
    return q, k, v, kc, vc, table, lens


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", default="512,64,8")
    p.add_argument("--past", default="1,64,65,128,256,512,1000")
    p.add_argument(
        "--tiles", default="64x4x2,64x4x3,16x1x2,16x1x3,32x1x2", help="CHUNKxWARPSxSTAGES, comma list"
    )
    p.add_argument("--splits", default="", help="SLICESxWARPSxSTAGES of the split kernel, comma list")
    p.add_argument("--cuda", default="", help="stages of the CUDA kernel (tiles in flight), comma list")
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--head-dim", type=int, default=64)
    p.add_argument("--block", type=int, default=64)
    p.add_argument("--calls-only", action="store_true", help="two calls of each tile, no timing (for ncu)")
    a = p.parse_args()
    if a.calls_only:
        for batch in (int(x) for x in a.batch.split(",")):
            for past in (int(x) for x in a.past.split(",")):
                inputs = make_inputs(batch, past, a.heads, a.head_dim, a.block, seed=0)
                for tile in (parse_tile(t) for t in a.tiles.split(",") if t):
                    for _ in range(2):
                        paged_decode_attention_triton(*inputs, 0.125, tile, append=True)
                for stages in (int(x) for x in a.cuda.split(",") if x):
                    for _ in range(2):
                        paged_decode_attention_cuda(*inputs, 0.125, append=True, stages=stages)
        torch.cuda.synchronize()
        return
    bw = copy_bandwidth(torch.device("cuda"))
    tiles = [parse_tile(t) for t in a.tiles.split(",") if t]
    cuda_stages = [int(x) for x in a.cuda.split(",") if x]
    splits = [tuple(int(x) for x in t.split("x")) for t in a.splits.split(",") if t]
    print(
        f"{torch.cuda.get_device_name()}, copy bandwidth {bw / 1e9:.0f} GB/s, fp16, {a.heads} heads of {a.head_dim}"
    )
    for batch in (int(x) for x in a.batch.split(",")):
        picked = pick_attention_tile(batch * a.heads, a.block)
        print(f"\nbatch {batch}: us per call (share of copy bandwidth); tile = tokens x warps x stages")
        head = [f"{t.chunk}x{t.num_warps}x{t.num_stages}{' *' if t == picked else ''}" for t in tiles]
        head += [f"split {n}x{w}x{st}" for n, w, st in splits]
        head += [f"cuda {st}" for st in cuda_stages]
        print("| past | " + " | ".join(head) + " |\n|---|" + "---|" * len(head))
        for past in (int(x) for x in a.past.split(",")):
            sets = [make_inputs(batch, past, a.heads, a.head_dim, a.block, seed=0)]
            size = 2 * sets[0][3].numel() * 2
            sets += [
                make_inputs(batch, past, a.heads, a.head_dim, a.block, i)
                for i in range(1, -(-ROTATE_BYTES // size))
            ]
            nbytes = 2 * batch * past * a.heads * a.head_dim * 2
            row = []
            kernels = (
                [
                    functools.partial(paged_decode_attention_triton, scale=0.125, append=True, tile=tile)
                    for tile in tiles
                ]
                + [
                    functools.partial(
                        split_decode_attention_triton,
                        scale=0.125,
                        splits=n,
                        num_warps=w,
                        num_stages=st,
                        append=True,
                    )
                    for n, w, st in splits
                ]
                + [
                    functools.partial(paged_decode_attention_cuda, scale=0.125, append=True, stages=st)
                    for st in cuda_stages
                ]
            )
            for kernel in kernels:
                fns = [functools.partial(kernel, *s) for s in sets]
                calls = [fns[i % len(fns)] for i in range(max(20, len(fns)))]
                t = graph_us(lambda: [f() for f in calls], reps=10, calls=1) / len(calls)  # noqa: B023
                row.append(f"{t:.1f} ({nbytes / (t / 1e6) / bw:.0%})")
            print(f"| {past} | " + " | ".join(row) + " |", flush=True)
            del sets


if __name__ == "__main__":
    main()
