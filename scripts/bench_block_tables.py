"""What building the host block tables costs (`roseinfer.block_tables.BlockTables.build`) on the CPU.

    PYTHONPATH=. python scripts/bench_block_tables.py [--batches 16,64,128,256,512 --blocks 2,8,16 --repeats 40]

For each batch of new sequences holding --blocks blocks each (GPT-2's 12 layers, 16 blocks a row), microseconds of
one build by stacking cached rows, when every row is made fresh (a new batch's first build before session 49, and
the eager path's) and when the rows were made before (a later build); and by writing the block lists in one numpy
pass (the static decode path's first build of a batch of more than `FRESH_ROWS` new sequences now; their rows are
made at its next build). Medians over --repeats, interleaved.
"""

import argparse
import statistics
import time

import torch

from roseinfer.block_tables import BlockTables
from roseinfer.sequence import SamplingParams, Sequence


def us(build, seqs: list[Sequence], rows: int) -> float:
    t0 = time.perf_counter_ns()
    build(seqs, rows)
    return (time.perf_counter_ns() - t0) / 1e3


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", default="16,64,128,256,512")
    p.add_argument("--blocks", default="2,8,16")
    p.add_argument("--repeats", type=int, default=40)
    a = p.parse_args()
    print("| batch x blocks | cached rows, made fresh | cached rows, made before | one pass |")
    print("|---|---|---|---|")
    for n in (int(x) for x in a.batches.split(",")):
        for blocks in (int(x) for x in a.blocks.split(",")):
            tables = BlockTables(12, n, 16, torch.device("cpu"))
            seqs = []
            for i in range(n):
                seq = Sequence(i, [1], SamplingParams(max_new_tokens=8), 0)
                seq.block_ids = list(range(1 + i * blocks, 1 + (i + 1) * blocks))
                seqs.append(seq)
            fresh, cached, lists = [], [], []
            for _ in range(a.repeats):
                for seq in seqs:
                    seq.forget_table_row()
                fresh.append(us(tables._build_from_rows, seqs, n))
                cached.append(us(tables._build_from_rows, seqs, n))
                lists.append(us(tables._build_from_lists, seqs, n))
            m = statistics.median
            print(f"| {n} x {blocks} | {m(fresh):.1f} | {m(cached):.1f} | {m(lists):.1f} |", flush=True)


if __name__ == "__main__":
    main()
