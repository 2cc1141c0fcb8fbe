"""The block manager's host time with per-layer pools against one pool (issue 42): what the accounting of a serving
step costs when every layer keeps its own free list, refcounts and prefix cache (as now) and when the layers share
one (the pools move in lock-step, so one pool is the same decisions made once).

    python scripts/bench_block_manager.py [--layers 12] [--batch 64] [--rounds 5]

"One pool" is measured as `BlockManager(num_layers=1)`: the same code making each decision once, which is what one
pool shared by every layer would do (its block lists and tables would then be broadcast over the layers). Per
operation, the median over rounds of: prompt admission (`allocate_prompt` + `register_prompt` of BATCH prompts of
PROMPT tokens, half of them sharing a cached prefix), the rollover blocks of a lock-step batch (`append_blocks`),
the static step's slot bookkeeping over 2 blocks of steps (`copy_shared_slots`, `fill_slots`), the eager step's
batched append slots (`batch_slots`, once per layer) and the release of every sequence (`release`).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from roseinfer.block_manager import BlockManager, blocks_for
from roseinfer.sequence import SamplingParams, Sequence


def one_round(layers: int, batch: int, prompt: int, block: int) -> dict[str, float]:
    """Mean microseconds per call of each operation, for one manager of `layers` pools."""
    per_seq = blocks_for(prompt + 4 * block, block)
    mgr = BlockManager(layers, (batch + 1) * per_seq, block, lambda layer, src, dst: None)
    shared = list(range(prompt))  # half the prompts share this one: prefix-cache hits
    seqs = [
        Sequence(
            i, shared if i % 2 else [i] + shared[1:], SamplingParams(max_new_tokens=4 * block), arrival_ns=0
        )
        for i in range(batch)
    ]
    calls: dict[str, list[float]] = {}

    def timed(name: str, fn, *args):
        t0 = time.perf_counter_ns()
        out = fn(*args)
        calls.setdefault(name, []).append((time.perf_counter_ns() - t0) / 1e3)
        return out

    for seq in seqs:
        keys, _ = timed("allocate_prompt (a prompt admitted)", mgr.allocate_prompt, seq)
        timed("register_prompt (a prompt admitted)", mgr.register_prompt, seq, keys)
        seq.num_cached = seq.num_tokens
    for _ in range(2 * block):
        past = np.fromiter((s.num_cached for s in seqs), dtype=np.int64, count=batch)
        starting = [s for s in seqs if s.num_cached == len(s.block_ids[0]) * block]
        if starting:
            timed("append_blocks (a lock-step rollover)", mgr.append_blocks, starting)
        slots = np.array(
            [
                [ids[p // block] for ids, p in zip((s.block_ids[layer] for s in seqs), past)]
                for layer in range(layers)
            ],
            dtype=np.int64,
        )  # [L, B]
        timed("copy_shared_slots (every static step)", mgr.copy_shared_slots, seqs, slots)
        timed("fill_slots (every static step)", mgr.fill_slots, slots, past)
        for s in seqs:
            s.num_cached += 1
    # The eager step's append slots (one call per layer), on a fresh step past the ones above.
    t0 = time.perf_counter_ns()
    for layer in range(layers):
        mgr.batch_slots(layer, [s.block_ids[layer] for s in seqs])
    calls["batch_slots, every layer (an eager step)"] = [(time.perf_counter_ns() - t0) / 1e3]
    for seq in seqs:
        timed("release (a sequence done)", mgr.release, seq)
    assert mgr.num_free() == mgr.num_blocks
    return {name: statistics.mean(v) for name, v in calls.items()}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prompt", type=int, default=200, help="prompt tokens")
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--rounds", type=int, default=5)
    a = p.parse_args()
    results: dict[int, list[dict[str, float]]] = {a.layers: [], 1: []}
    for _ in range(a.rounds):  # interleaved: the machine's drift falls on both
        for layers in (a.layers, 1):
            results[layers].append(one_round(layers, a.batch, a.prompt, a.block_size))
    print(
        f"layers {a.layers}, batch {a.batch}, prompts of {a.prompt} tokens, blocks of {a.block_size}, "
        f"{a.rounds} rounds (median of each round's mean), us per call"
    )
    print(f"| operation | {a.layers} pools (now) | one pool | ratio |")
    print("|---|---|---|---|")
    for name in results[1][0]:
        many = statistics.median(r[name] for r in results[a.layers])
        one = statistics.median(r[name] for r in results[1])
        print(f"| {name} | {many:.1f} | {one:.1f} | {many / one:.1f}x |")


if __name__ == "__main__":
    main()
