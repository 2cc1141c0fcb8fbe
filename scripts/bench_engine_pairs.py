"""Before/after pairs of the engine on one machine, measured side by side in one process (A/B interleaved).

    python scripts/bench_engine_pairs.py --model gpt2-tiny --num-requests 16 --max-new-tokens 256 --rounds 3

On the GPU, the fast path with equal one-token prompts (every sequence starts a block in the same step), with and
without the block-table row cache:

    python scripts/bench_engine_pairs.py --model gpt2 --device cuda --paged-attn --cuda-graph --num-requests 64 \
        --max-new-tokens 512 --prompt-len 1 --same-prompts --rounds 10 --configs default,--no-block-table-cache --no-hf

Each round runs every configuration once (order rotated per round); the table gives medians over rounds of
decode throughput, ITL p50/p99, ITL p99 of the tokens produced by rollover steps vs the rest, and the median host
time of the other decode steps (`engine.step()` calls that decoded, rollover steps left out). Also: our
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
from roseinfer.bench import roofline
from roseinfer.bench.hf_reference import hf_generate, to_hf
from roseinfer.config import EngineConfig
from roseinfer.engine import Engine
from roseinfer.graph_kernels import GraphKernels
from roseinfer.sequence import SamplingParams

# Engine options (EngineConfig fields) per configuration; `_kernels`: the captured step's kernels of an earlier
# design (`GraphKernels` fields; with --cuda-graph). The kernel designs issue 27 retired are no engine options any
# more: their names stay here so that the pair commands docs/BENCHMARKS.md records still run.
CONFIGS = {
    "default": {},
    "--no-batched-kv-append": {"batched_kv_append": False},
    "--no-batched-rollover": {"batched_rollover": False},
    "--no-block-table-cache": {"block_table_cache": False},
    "tracing on (NVTX + record_function)": {"_tracing": True},
    "--no-pdl": {"_kernels": {"pdl": False}},
    "--no-attn-prefetch": {"_kernels": {"pdl_attention_prefetch": False}},
    "--no-early-release": {"_kernels": {"pdl_early_release": False}},
    "--no-embedding-gather": {"_kernels": {"embedding_gather": False}},
    "--no-lm-head-gemv": {"_kernels": {"lm_head_gemv": False}},
    "--no-embedding-gather --no-lm-head-gemv": {
        "_kernels": {"embedding_gather": False, "lm_head_gemv": False}
    },
    "--no-skinny-gemm": {"_kernels": {"skinny_gemm_max_batch": 0}},
    "--no-attn-chunks": {"_kernels": {"attention_chunks": False}},
    "--no-pdl-64": {"_kernels": {"pdl_narrow_max_batch": 0}},
    # issue 27's kernels all off: the fast path as it was before that issue (no PDL and no split attention turn the
    # attention's prefetch off too)
    "--no-gemv --no-pdl --no-split-attn --no-norm-gemv": {
        "_kernels": {"gemv_max_batch": 0, "pdl": False, "split_attention": False, "norm_gemv": False}
    },
}


def run(engine: Engine, prompts, max_new_tokens, bandwidth: float | None = None) -> dict:
    """One run of every prompt; with `bandwidth` (bytes/s, CUDA) also its decode time against the HBM floor."""
    params = SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True)
    engine.stats.update(decode_ns=0, decode_steps=0, decode_kv_tokens=0)
    engine.rollover_steps.clear()
    engine.decode_steps = 0
    t0 = time.perf_counter()
    seqs = [engine.add_request(p, params) for p in prompts]
    steps: list[tuple[int, int]] = []  # (decode step index, ns) of each step() call that decoded
    while engine.has_unfinished():
        index, s0 = engine.decode_steps, time.perf_counter_ns()
        engine.step()
        if engine.decode_steps > index:
            steps.append((index, time.perf_counter_ns() - s0))
    total = time.perf_counter() - t0
    roll, rest, all_itl = [], [], []
    for s in seqs:
        gaps = np.diff(s.token_ns) / 1e6
        all_itl += gaps.tolist()
        for gap, step in zip(gaps, s.token_step[1:]):
            (roll if step in engine.rollover_steps else rest).append(gap)
    tokens = sum(len(s.output_ids) for s in seqs)
    normal = [ns for index, ns in steps if index not in engine.rollover_steps]
    floor_s = float("nan")
    if bandwidth is not None:
        floor_s = roofline.decode_floor_seconds(
            engine.model, engine.stats["decode_steps"], engine.stats["decode_kv_tokens"], bandwidth
        )
    return {
        "floor_share": floor_s / (engine.stats["decode_ns"] / 1e9),
        "step_us_elsewhere": float(np.median(normal)) / 1e3 if normal else float("nan"),
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
    ap.add_argument("--same-prompts", action="store_true", help="every request the same prompt (lock-step)")
    ap.add_argument("--no-hf", action="store_true")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dtype", default=None, help="default: float16 on CUDA, float32 on the CPU")
    ap.add_argument("--paged-attn", action="store_true")
    ap.add_argument("--cuda-graph", action="store_true")
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated names of CONFIGS to run")
    args = ap.parse_args()
    g = torch.Generator().manual_seed(0)
    prompts = [
        torch.randint(0, 50000, (args.prompt_len,), generator=g).tolist() for _ in range(args.num_requests)
    ]
    if args.same_prompts:
        prompts = [prompts[0]] * len(prompts)
    batch = args.num_requests
    dtype = args.dtype or ("float16" if args.device == "cuda" else "float32")
    engines = {}
    for name in args.configs.split(","):
        opts = {k: v for k, v in CONFIGS[name].items() if not k.startswith("_")}
        engines[name] = Engine(
            args.model,
            EngineConfig(
                max_batch_size=batch, prefill_max_batch_size=batch, device=args.device, dtype=dtype,
                paged_attn=args.paged_attn, cuda_graph=args.cuda_graph, **opts,
            ),
        )  # fmt: skip
        kernels = CONFIGS[name].get("_kernels")
        if kernels is not None and args.cuda_graph:
            engines[name].use_static_decode(capture=True, kernels=GraphKernels(**kernels))
        run(engines[name], prompts[:2], 8)  # warm up
    first = next(iter(engines.values()))
    bandwidth = roofline.copy_bandwidth(first.device) if first.device.type == "cuda" else None
    hf = None if args.no_hf else to_hf(next(iter(engines.values())).model)
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
            results[name].append(run(engines[name], prompts, args.max_new_tokens, bandwidth))
            tracing.configure(nvtx=False, record_function=False)
    med = lambda name, key: statistics.median(x[key] for x in results[name])  # noqa: E731
    print(
        f"model={args.model} requests={args.num_requests} batch={batch} prompt={args.prompt_len} "
        f"new_tokens={args.max_new_tokens} rounds={args.rounds} threads={torch.get_num_threads()}"
    )
    if bandwidth is not None:
        print(
            f"HBM floor: copy bandwidth {bandwidth / 1e9:.0f} GB/s, weights "
            f"{roofline.weight_bytes(first.model) / 1e6:.0f} MB per step + the K/V each step reads"
        )
    print(
        "| configuration | decode tok/s | total tok/s | ITL p50 ms | ITL p99 ms | ITL p99 at rollover ms "
        "| ITL p99 elsewhere ms | step p50 elsewhere us | share of the HBM floor |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in engines:
        print(
            f"| {name} | {med(name, 'decode_tok_s'):.0f} | {med(name, 'total_tok_s'):.0f} | {med(name, 'itl_p50'):.2f} | "
            f"{med(name, 'itl_p99'):.2f} | {med(name, 'itl_roll_p99'):.2f} | {med(name, 'itl_rest_p99'):.2f} | "
            f"{med(name, 'step_us_elsewhere'):.1f} | {med(name, 'floor_share'):.1%} |"
        )
    if "default" in engines:
        for name in engines:
            if name != "default":  # per-round ratios: each round ran both, so the machine's drift cancels
                ratios = [
                    x["step_us_elsewhere"] / d["step_us_elsewhere"]
                    for x, d in zip(results[name], results["default"])
                ]
                print(
                    f"step p50 elsewhere, {name} / default per round: median {statistics.median(ratios):.4f}, "
                    f"min {min(ratios):.4f}, max {max(ratios):.4f}"
                )
                tok = [
                    d["decode_tok_s"] / x["decode_tok_s"] for x, d in zip(results[name], results["default"])
                ]
                print(
                    f"decode tok/s, default / {name} per round: median {statistics.median(tok):.4f}, "
                    f"min {min(tok):.4f}, max {max(tok):.4f}"
                )
    if hf is not None and "default" in engines:
        ours, theirs = med("default", "total_tok_s"), med("hf generate", "total_tok_s")
        print(f"| hf generate (same weights, batch {batch}) | - | {theirs:.0f} | - | - | - | - |")
        print(f"\nours/hf (total completion tok/s, prefill included): {ours / theirs:.2f}x")
    if "default" in engines and "tracing on (NVTX + record_function)" in engines:
        base, traced = (
            med("default", "decode_tok_s"),
            med("tracing on (NVTX + record_function)", "decode_tok_s"),
        )
        print(f"tracing overhead (decode tok/s, on vs off): {100 * (base - traced) / base:+.1f}%")


if __name__ == "__main__":
    main()
