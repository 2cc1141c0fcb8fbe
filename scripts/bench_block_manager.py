"""The block manager's host time per operation of a serving step (issue 42: one block pool for every layer, where
there was one pool per layer).

    python scripts/bench_block_manager.py [--batch 64] [--prompt 200] [--rounds 7]

A batch of BATCH prompts of PROMPT tokens (half of them sharing a cached prefix) is admitted, decoded in lock-step
for two blocks of steps on the static path's bookkeeping, given one eager step's slots, and released. Per
operation, the median over rounds of each round's mean, in µs per call: prompt admission (`allocate_prompt`,
`register_prompt`), the static step's slot bookkeeping (`copy_shared_slots`, `fill_slots`), the rollover blocks of
the lock-step batch (`append_blocks`), the eager step's slots (`roseinfer.kv_cache.token_slots`, batched) and the
release of a sequence (`release`). The per-layer pools' figures came from this script at 66f13fe, which timed 12
pools (docs/BENCHMARKS.md, session 17).

    PYTHONPATH=TREE python scripts/bench_block_manager.py --appends [--block-size 16] [--steps 400]

An eager decode step's KV appends instead (`DecodeKV.append` for 12 layers, 16 requests of GPT-2 small's heads,
blocks of --block-size), batched and one request at a time (`--no-batched-kv-append`, the planted regression):
the median over normal and over rollover steps. It uses only what the engine had before one pool too, so
PYTHONPATH at a checkout of 66f13fe measures the per-layer pools' appends.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from roseinfer.block_manager import BlockManager, blocks_for
from roseinfer.sequence import SamplingParams, Sequence


def one_round(batch: int, prompt: int, block: int) -> dict[str, float]:
    """Mean microseconds per call of each operation."""
    from roseinfer.kv_cache import token_slots  # one pool's (not at 66f13fe: --appends runs there too)

    mgr = BlockManager(12, (batch + 1) * blocks_for(prompt + 4 * block, block), block, lambda src, dst: None)
    shared = list(range(prompt))  # half the prompts share this one: prefix-cache hits
    params = SamplingParams(max_new_tokens=4 * block)
    seqs = [Sequence(i, shared if i % 2 else [i] + shared[1:], params, arrival_ns=0) for i in range(batch)]
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
        past = np.fromiter((s.num_cached for s in seqs), dtype=np.int64, count=batch)  # [B]
        starting = mgr.starting_a_block(seqs)
        if starting:
            timed("append_blocks (a lock-step rollover of the batch)", mgr.append_blocks, starting)
        slots = np.array([s.block_ids[p // block] for s, p in zip(seqs, past)], dtype=np.int64)  # [B]
        timed("copy_shared_slots (every static step)", mgr.copy_shared_slots, seqs, slots)
        timed("fill_slots (every static step)", mgr.fill_slots, slots, past)
        for s in seqs:
            s.num_cached += 1
    # One eager step's slots, past the steps above.
    timed("token_slots (an eager step, every layer)", token_slots, mgr, [s.block_ids for s in seqs], True)
    for seq in seqs:
        timed("release (a sequence done)", mgr.release, seq)
    assert mgr.num_free() == mgr.num_blocks
    return {name: statistics.mean(v) for name, v in calls.items()}


def append_step_us(batched: bool, block: int, steps: int) -> tuple[float, float]:
    """Median µs of an eager step's KV appends in every layer: (normal steps, rollover steps)."""
    import torch

    from roseinfer.kv_cache import KVCache
    from roseinfer.kv_context import DecodeKV

    layers, batch, heads, head_dim = 12, 16, 12, 64
    num_blocks = batch * (blocks_for(10 + steps, block) + 1)
    cache = KVCache(layers, num_blocks + 1, block, heads, head_dim)
    mgr = BlockManager(layers, num_blocks, block, cache.copy_block, prefix_cache=False)
    seqs = [
        Sequence(i, [i] * 10, SamplingParams(max_new_tokens=steps + 1), arrival_ns=0) for i in range(batch)
    ]
    for seq in seqs:
        mgr.allocate_prompt(seq)
        mgr.prompt_slots(seq.block_ids, 0, seq.num_tokens)
        seq.num_cached = seq.num_tokens
    k = torch.randn(batch, heads, head_dim)  # [B, H, D]
    normal, rollover = [], []
    for _ in range(steps):
        kv = DecodeKV(mgr, cache, seqs, None, None, 1.0, batched)
        t0 = time.perf_counter_ns()
        for layer in range(layers):
            kv.append(layer, k, k)
        (rollover if mgr.last_append_counts()[0] else normal).append((time.perf_counter_ns() - t0) / 1e3)
        for seq in seqs:
            seq.num_cached += 1
    return statistics.median(normal), statistics.median(rollover)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--prompt", type=int, default=200, help="prompt tokens")
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument(
        "--appends", action="store_true", help="an eager step's KV appends, batched and per request"
    )
    p.add_argument("--steps", type=int, default=400, help="--appends: decode steps")
    a = p.parse_args()
    if a.appends:
        import torch

        torch.set_num_threads(1)
        print(f"an eager step's KV appends, 12 layers x 16 requests, blocks of {a.block_size}: median us")
        print("| appends | normal step | rollover step |")
        print("|---|---|---|")
        for batched in (True, False):
            normal, rollover = append_step_us(batched, a.block_size, a.steps)
            name = "batched (default)" if batched else "one request at a time (--no-batched-kv-append)"
            print(f"| {name} | {normal:.0f} | {rollover:.0f} |")
        return
    rounds = [one_round(a.batch, a.prompt, a.block_size) for _ in range(a.rounds)]
    print(
        f"batch {a.batch}, prompts of {a.prompt} tokens, blocks of {a.block_size}, {a.rounds} rounds "
        "(median of each round's mean), us per call"
    )
    print("| operation | one pool |")
    print("|---|---|")
    for name in rounds[0]:
        print(f"| {name} | {statistics.median(r[name] for r in rounds):.1f} |")


if __name__ == "__main__":
    main()
