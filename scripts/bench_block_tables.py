"""What building the host block tables costs (`roseinfer.block_tables.BlockTables.build`), both ways, on the CPU.

    PYTHONPATH=. python scripts/bench_block_tables.py [--batches 16,32,64,128,256,512 --blocks 2 --repeats 60]

For each batch of sequences holding --blocks blocks each (GPT-2's 12 layers, 16 blocks a row): microseconds of one
build by stacking each sequence's cached row, when the rows are fresh (a new batch: every sequence's first step)
and when they are cached (a later build), and by writing the block lists in one numpy pass (the engine's rule: one
pass where more than `FRESH_ROWS` rows are fresh); medians over --repeats, the three interleaved.
"""

import argparse
import statistics
import time

import torch

from roseinfer.block_tables import FRESH_ROWS, BlockTables
from roseinfer.sequence import SamplingParams, Sequence


def us(build, seqs: list[Sequence], rows: int) -> float:
    t0 = time.perf_counter_ns()
    build(seqs, rows)
    return (time.perf_counter_ns() - t0) / 1e3


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batches", default="16,32,64,128,256,512")
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--repeats", type=int, default=60)
    a = p.parse_args()
    print(
        f"build of the host tables, us (one pass where more than {FRESH_ROWS} rows are fresh, in the engine)"
    )
    print("| batch | rows, fresh | rows, cached | one pass |")
    print("|---|---|---|---|")
    for n in (int(x) for x in a.batches.split(",")):
        tables = BlockTables(12, n, 16, torch.device("cpu"))
        seqs = []
        for i in range(n):
            seq = Sequence(i, [1], SamplingParams(max_new_tokens=8), 0)
            seq.block_ids = list(range(1 + i * a.blocks, 1 + (i + 1) * a.blocks))
            seqs.append(seq)
        fresh, cached, lists = [], [], []
        for _ in range(a.repeats):
            for seq in seqs:
                seq.forget_table_row()
            fresh.append(us(tables._build_from_rows, seqs, n))
            cached.append(us(tables._build_from_rows, seqs, n))
            lists.append(us(tables._build_from_lists, seqs, n))
        m = statistics.median
        print(f"| {n} | {m(fresh):.1f} | {m(cached):.1f} | {m(lists):.1f} |", flush=True)


if __name__ == "__main__":
    main()
