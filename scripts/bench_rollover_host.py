"""Host time of the static decode path's slot reservation (what CUDA graph steps do before each replay), for a
batch in lock-step (equal one-token prompts: every sequence starts a block in the same step), both rollover
designs, without a model: the reservation's cost depends on the layers, the batch and the table width only.

    python scripts/bench_rollover_host.py --batch 64 --layers 12 --rounds 3

Prints the host time per step before the launch (`reserve`: on the path from the previous step's tokens to this
launch) and after it (`reserve_ahead`: blocks reserved ahead, while the GPU runs), for the steps that start blocks,
the steps that write blocks reserved ahead into the host tables, and the rest; and, for the
rollover steps, the parts of the time before the launch (block allocation, table rows and stack, slot blocks,
copy-on-write scan, fill counts).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from roseinfer import config, tracing
from roseinfer.config import EngineConfig
from roseinfer.model_runner import ModelRunner
from roseinfer.sequence import SamplingParams, Sequence

PARTS = {
    "mgr": {
        "append_blocks": "allocate blocks (BlockManager.append_blocks)",
        "copy_shared_slots": "copy-on-write scan",
        "fill_slots": "fill counts",
        "starting_a_block": "find the sequences starting a block",
    },
    "tables": {"build": "table rows + stack (BlockTables.build)", "put_blocks": "new columns in place"},
    "slots": {"_slot_blocks": "slot blocks from the host tables"},
}


def run(blocks_ahead: bool, batch: int, model: str, steps: int) -> tuple[dict, dict]:
    runner = ModelRunner(model, EngineConfig(max_batch_size=batch, blocks_ahead=blocks_ahead))
    runner.use_static_decode(capture=False)
    parts: dict[str, list[int]] = {}
    tracing.time_calls(runner.mgr, {k: k for k in PARTS["mgr"]}, parts)
    tracing.time_calls(runner.tables, {k: k for k in PARTS["tables"]}, parts)
    tracing.time_calls(runner.slots, {k: k for k in PARTS["slots"]}, parts)
    params = SamplingParams(max_new_tokens=steps + 1, ignore_eos=True)
    seqs = [Sequence(id=i, prompt_ids=[1], params=params, arrival_ns=0) for i in range(batch)]
    for seq in seqs:
        runner.mgr.allocate_prompt(seq)
        seq.num_cached = 1
    by_kind: dict[str, list[tuple[float, float]]] = {
        "rollover": [],
        "writing reserved blocks": [],
        "other": [],
    }
    roll_parts: dict[str, list[float]] = {}
    rows = runner.graphs.bucket_for(batch)
    for step in range(steps):
        for values in parts.values():
            values.clear()
        writes = runner.slots.pending is not None  # blocks reserved after the last launch go into the tables
        t0 = time.perf_counter_ns()
        rollovers, _, changed = runner._reserve_decode_slots(seqs, rows)
        t1 = time.perf_counter_ns()
        for seq in seqs:  # (the launch) the new token's K/V is written by this step
            seq.num_cached += 1
        t2 = time.perf_counter_ns()
        runner.slots.reserve_ahead(seqs)
        t3 = time.perf_counter_ns()
        if step == 0:
            continue  # the first step builds the tables for the new batch
        kind = "rollover" if rollovers else "writing reserved blocks" if writes or changed else "other"
        by_kind[kind].append(((t1 - t0) / 1e3, (t3 - t2) / 1e3))
        if rollovers:
            for name, values in parts.items():
                roll_parts.setdefault(name, []).append(sum(values) / 1e3)
    return by_kind, roll_parts


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--layers", type=int, default=12, help="GPT-2 small has 12")
    p.add_argument("--steps", type=int, default=510)
    p.add_argument("--rounds", type=int, default=3)
    a = p.parse_args()
    tracing.configure(nvtx=False, record_function=False)
    model = f"gpt2-{a.layers}-layers-narrow"
    config.BUILTIN_MODELS[model] = config.ModelConfig(n_embd=64, n_layer=a.layers, n_head=4)
    results = {}
    for _ in range(a.rounds):  # interleaved, so both designs see the same machine load
        for ahead in (False, True):
            by_kind, roll_parts = run(ahead, a.batch, model, a.steps)
            kinds, parts = results.setdefault(ahead, ({}, {}))
            for k, v in by_kind.items():
                kinds.setdefault(k, []).extend(v)
            for k, v in roll_parts.items():
                parts.setdefault(k, []).extend(v)
    print(f"batch {a.batch}, {a.layers} layers, {a.steps} steps x {a.rounds} rounds, host us per step")
    print("| design | steps | count | before launch p50 | p99 | max | after launch p50 | p99 |")
    print("|---|---|---|---|---|---|---|---|")
    for ahead, (kinds, _) in results.items():
        design = "ahead (default)" if ahead else "at the boundary (--no-blocks-ahead)"
        for kind, v in kinds.items():
            if v:
                pre, post = np.asarray(v).T  # [N] each
                print(
                    f"| {design} | {kind} | {len(pre)} | {np.median(pre):.1f} | {np.percentile(pre, 99):.1f} "
                    f"| {pre.max():.1f} | {np.median(post):.1f} | {np.percentile(post, 99):.1f} |"
                )
    labels = {k: v for group in PARTS.values() for k, v in group.items()}
    for ahead, (_, parts) in results.items():
        design = "ahead" if ahead else "at the boundary"
        print(f"\nrollover steps, {design}: parts before the launch (p50 us)")
        for name, v in sorted(parts.items(), key=lambda kv: -np.median(kv[1])):
            if np.median(v) > 0:
                print(f"- {labels[name]}: {np.median(v):.1f}")


if __name__ == "__main__":
    main()
