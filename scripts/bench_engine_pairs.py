"""Before/after pairs of the engine on one machine, measured side by side in one process (A/B interleaved).

    python scripts/bench_engine_pairs.py --model gpt2-tiny --num-requests 16 --max-new-tokens 256 --rounds 3

Each round runs every configuration once (order rotated per round); the table gives medians over rounds of
decode throughput, ITL p50/p99, and ITL p99 of the tokens produced by rollover steps vs the rest. Also: our
engine against Hugging Face `generate` on the same weights and batch, and tracing (NVTX + record_function)
on vs off.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from roseinfer import tracing
from roseinfer.bench.hf_reference import hf_generate, to_hf
from roseinfer.config import EngineConfig
from roseinfer.engine import Engine
from roseinfer.sequence import SamplingParams

CONFIGS = {
    "default": {},
    "--no-batched-kv-append": {"batched_kv_append": False},
    "--no-batched-rollover": {"batched_rollover": False},
    "--no-block-table-cache": {"block_table_cache": False},
    "tracing on (NVTX + record_function)": {"_tracing": True},
}


def run(engine: Engine, prompts, max_new_tokens) -> dict:
    params = SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True)
    engine.stats.update(decode_ns=0)
    engine.rollover_steps.clear()
    engine.decode_steps = 0
    t0 = time.perf_counter()
    seqs = [engine.add_request(p, params) for p in prompts]
    while engine.has_unfinished():
        engine.step()
    total = time.perf_counter() - t0
    roll, rest, all_itl = [], [], []
    for s in seqs:
        gaps = np.diff(s.token_ns) / 1e6
        all_itl += gaps.tolist()
        for gap, step in zip(gaps, s.token_step[1:]):
            (roll if step in engine.rollover_steps else rest).append(gap)
    tokens = sum(len(s.output_ids) for s in seqs)
    return {
        "decode_tok_s": tokens / (engine.stats["decode_ns"] / 1e9),
        "total_tok_s": tokens / total,
        "itl_p50": float(np.percentile(all_itl, 50)),
        "itl_p99": float(np.percentile(all_itl, 99)),
        "itl_roll_p99": float(np.percentile(roll, 99)) if roll else float("nan"),
        "itl_rest_p99": float(np.percentile(rest, 99)) if rest else float("nan"),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2-tiny")
    ap.add_argument("--num-requests", type=int, default=16)
    ap.add_argument("--max-new-tokens", type=int, default=256)
    ap.add_argument("--prompt-len", type=int, default=45)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--no-hf", action="store_true")
    args = ap.parse_args()
    g = torch.Generator().manual_seed(0)
    prompts = [
        torch.randint(0, 50000, (args.prompt_len,), generator=g).tolist() for _ in range(args.num_requests)
    ]
    batch = args.num_requests
    engines = {}
    for name, opts in CONFIGS.items():
        opts = {k: v for k, v in opts.items() if not k.startswith("_")}
        engines[name] = Engine(
            args.model, EngineConfig(max_batch_size=batch, prefill_max_batch_size=batch, **opts)
        )
        run(engines[name], prompts[:2], 8)  # warm up
    hf = None if args.no_hf else to_hf(engines["default"].model)
    if hf is not None:
        hf_generate(hf, prompts, args.max_new_tokens, batch)  # warm up at full length, as the engine is
    results: dict[str, list[dict]] = {name: [] for name in engines}
    results["hf generate"] = []
    names = list(engines) + (["hf generate"] if hf is not None else [])
    for r in range(args.rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            if name == "hf generate":
                out = hf_generate(hf, prompts, args.max_new_tokens, batch)
                results[name].append({"total_tok_s": out["completion_tokens"] / out["seconds"]})
                continue
            tracing.configure(
                nvtx=CONFIGS[name].get("_tracing", False),
                record_function=CONFIGS[name].get("_tracing", False),
            )
            results[name].append(run(engines[name], prompts, args.max_new_tokens))
            tracing.configure(nvtx=False, record_function=False)
    med = lambda name, key: statistics.median(x[key] for x in results[name])  # noqa: E731
    print(
        f"model={args.model} requests={args.num_requests} batch={batch} prompt={args.prompt_len} "
        f"new_tokens={args.max_new_tokens} rounds={args.rounds} threads={torch.get_num_threads()}"
    )
    print(
        "| configuration | decode tok/s | total tok/s | ITL p50 ms | ITL p99 ms | ITL p99 at rollover ms | ITL p99 elsewhere ms |"
    )
    print("|---|---|---|---|---|---|---|")
    for name in engines:
        print(
            f"| {name} | {med(name, 'decode_tok_s'):.0f} | {med(name, 'total_tok_s'):.0f} | {med(name, 'itl_p50'):.2f} | "
            f"{med(name, 'itl_p99'):.2f} | {med(name, 'itl_roll_p99'):.2f} | {med(name, 'itl_rest_p99'):.2f} |"
        )
    if hf is not None:
        ours, theirs = med("default", "total_tok_s"), med("hf generate", "total_tok_s")
        print(f"| hf generate (same weights, batch {batch}) | - | {theirs:.0f} | - | - | - | - |")
        print(f"\nours/hf (total completion tok/s, prefill included): {ours / theirs:.2f}x")
    base, traced = med("default", "decode_tok_s"), med("tracing on (NVTX + record_function)", "decode_tok_s")
    print(f"tracing overhead (decode tok/s, on vs off): {100 * (base - traced) / base:+.1f}%")


if __name__ == "__main__":
    main()
