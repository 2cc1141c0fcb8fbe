"""The greedy argmax of a decode step's logits (`roseinfer.kernels.argmax`) alone, at each of its tiles.

    python scripts/bench_argmax.py --rows 1,64,224,512 [--chunks 2048,4096,8192,16384 --warps 4,8,16]

For each batch (logits [B, 50,257] fp16, rows of the padded lm_head's [B, 50,304] output, as in the step) and each
tile of its first kernel (logits a program, warps): the time of one call of the argmax's two kernels inside a CUDA graph of
back-to-back calls, median of 20 replays, twice: on one logits buffer (warm: what the lm_head just wrote stays in
L2 up to about 200 rows) and rotating over copies past L2 (cold). torch.argmax for reference. (Session 49 also
timed a design that reduced int64 (value, -index) keys once rather than the max and then its first index: slower
from 64 rows on, removed; docs/BENCHMARKS.md.)
"""

import argparse

import torch

from roseinfer.bench.timing import graph_copies_us
from roseinfer.kernels.argmax import argmax_triton

L2_BYTES = 50 * 2**20
V, V_PAD = 50257, 50304


def bench_rows(rows: int, chunks: list[int], warps: list[int]) -> None:
    cold_copies = max(4, -(-3 * L2_BYTES // (rows * V_PAD * 2)))
    logits = [torch.randn(rows, V_PAD, device="cuda").half()[:, :V] for _ in range(cold_copies)]
    want = torch.argmax(logits[0], dim=-1)

    def time(fn) -> tuple[float, float]:
        warm = graph_copies_us(lambda i: fn(logits[0]), 20)
        return warm, graph_copies_us(lambda i: fn(logits[i]), cold_copies)

    warm, cold = time(lambda x: torch.argmax(x, dim=-1))
    print(f"| {rows} | torch.argmax | | | {warm:.2f} | {cold:.2f} |", flush=True)
    for chunk in chunks:
        for w in warps:
            assert torch.equal(argmax_triton(logits[0], chunk=chunk, num_warps=w), want), (rows, chunk, w)
            warm, cold = time(lambda x, c=chunk, w=w: argmax_triton(x, chunk=c, num_warps=w))
            print(f"| {rows} | argmax_triton | {chunk} | {w} | {warm:.2f} | {cold:.2f} |", flush=True)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", default="1,64,224,512")
    p.add_argument("--chunks", default="2048,4096,8192,16384")
    p.add_argument("--warps", default="4,8,16")
    a = p.parse_args()
    print("| rows | kernel | chunk | warps | warm us | cold us |")
    print("|---|---|---|---|---|---|")
    for rows in (int(x) for x in a.rows.split(",")):
        bench_rows(rows, [int(x) for x in a.chunks.split(",")], [int(x) for x in a.warps.split(",")])


if __name__ == "__main__":
    main()
