"""Shared by `python -m roseinfer.benchmark_scheduler` and `python -m roseinfer.benchmark_streaming`.

Both build the same engine from the same flags, run warmup and measured runs, and print the same report:
decode and total time, throughput (completion tokens/s over decode time and over total time), TTFT, TPOT,
ITL p50/p95/p99 and latency. `--compare-hf` also times Hugging Face `generate` on the same weights and
prompts, in the same process, and prints the ratio.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np
import torch

from roseinfer import steplog, tracing
from roseinfer.config import EngineConfig
from roseinfer.engine import Engine
from roseinfer.sequence import SamplingParams
from roseinfer.tokenizer import load_tokenizer

DEFAULT_PROMPT = "The quick brown fox jumps over the lazy dog. "


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def build_parser(prog: str, description: str, default_mode: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument(
        "--hf-model-id",
        default=None,
        help="checkpoint folder or built-in name (default: gpt2 on a GPU, gpt2-tiny on CPU)",
    )
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument(
        "--dtype",
        default=None,
        choices=["float32", "float16", "bfloat16"],
        help="default: float16 on cuda, float32 on cpu",
    )
    p.add_argument("--prompt", default=DEFAULT_PROMPT)
    p.add_argument(
        "--prompt-repeats",
        default="1",
        help="comma list; request i repeats the prompt repeats[i %% len] times",
    )
    p.add_argument("--num-requests", type=int, default=16)
    p.add_argument("--max-new-tokens", type=int, default=128)
    p.add_argument("--max-batch-size", type=int, default=16)
    p.add_argument("--prefill-max-batch-size", type=int, default=16)
    p.add_argument("--prefill-admission-policy", default="fifo", choices=["fifo", "shortest-first"])
    p.add_argument("--submit-interval-ms", type=float, default=0.0, help="online mode: gap between arrivals")
    p.add_argument("--mode", default=default_mode, choices=["online", "offline"])
    p.add_argument("--pretok", action="store_true", help="tokenize prompts before timing starts")
    p.add_argument(
        "--tokenize-workers",
        type=int,
        default=1,
        help="threads tokenizing prompts (without --pretok); 0 or 1: in the calling thread, no pool",
    )
    p.add_argument("--block-size", type=int, default=64)
    p.add_argument("--num-blocks", type=int, default=None)
    p.add_argument("--paged-attn", action="store_true")
    p.add_argument("--cuda-graph", action="store_true")
    p.add_argument("--no-prefix-cache", action="store_true")
    p.add_argument("--no-stop-on-eos", action="store_true")
    p.add_argument(
        "--no-batched-kv-append", action="store_true", help="earlier design: one append per request"
    )
    p.add_argument(
        "--no-batched-rollover", action="store_true", help="earlier design: rollover via the slow path"
    )
    p.add_argument(
        "--no-block-table-cache", action="store_true", help="earlier design: rows rebuilt every step"
    )
    p.add_argument(
        "--no-overlap-decode",
        action="store_true",
        help="earlier design: with --cuda-graph, wait for each step's tokens before preparing the next",
    )
    p.add_argument(
        "--no-blocks-ahead",
        action="store_true",
        help="earlier design: with --cuda-graph, allocate each KV block in the step that starts it (all of a "
        "lock-step batch at once)",
    )
    p.add_argument(
        "--cpu-threads",
        type=int,
        default=None,
        metavar="N",
        help="CPU only: torch intra-op threads (default: OMP_NUM_THREADS if set, else 1 for models up to GPT-2 "
        "small, half the cores for wider ones; roseinfer/cpu_threads.py says why)",
    )
    p.add_argument("--warmup-runs", type=int, default=1)
    p.add_argument("--repeat-runs", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--compare-hf", action="store_true", help="also time Hugging Face generate on the same weights"
    )
    p.add_argument("--json", default=None, metavar="PATH", help="also write the results as JSON to PATH")
    return p


def parse(parser: argparse.ArgumentParser, argv: list[str] | None):
    args = parser.parse_args(argv)
    for name in (
        "num_requests",
        "max_new_tokens",
        "max_batch_size",
        "prefill_max_batch_size",
        "repeat_runs",
    ):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1")
    if args.cpu_threads is not None and args.cpu_threads < 1:
        parser.error("--cpu-threads must be >= 1")
    for name in ("tokenize_workers", "warmup_runs"):
        if getattr(args, name) < 0:
            parser.error(f"--{name.replace('_', '-')} must be >= 0")
    try:
        args.repeats = [int(x) for x in args.prompt_repeats.split(",")]
    except ValueError:
        parser.error(f"--prompt-repeats must be a comma list of integers, got {args.prompt_repeats!r}")
    if any(r < 1 for r in args.repeats):
        parser.error("--prompt-repeats values must be >= 1")
    args.device = args.device or default_device()
    args.hf_model_id = args.hf_model_id or ("gpt2" if args.device.startswith("cuda") else "gpt2-tiny")
    args.dtype = args.dtype or ("float16" if args.device.startswith("cuda") else "float32")
    return args


def engine_config(args) -> EngineConfig:
    return EngineConfig(
        device=args.device,
        dtype=args.dtype,
        seed=args.seed,
        block_size=args.block_size,
        num_blocks=args.num_blocks,
        max_batch_size=args.max_batch_size,
        prefill_max_batch_size=args.prefill_max_batch_size,
        prefill_admission_policy=args.prefill_admission_policy,
        prefix_cache=not args.no_prefix_cache,
        batched_kv_append=not args.no_batched_kv_append,
        batched_rollover=not args.no_batched_rollover,
        block_table_cache=not args.no_block_table_cache,
        paged_attn=args.paged_attn,
        cuda_graph=args.cuda_graph,
        overlap_decode=not args.no_overlap_decode,
        blocks_ahead=not args.no_blocks_ahead,
        cpu_threads=args.cpu_threads,
    )


def prompt_texts(args) -> list[str]:
    return [args.prompt * args.repeats[i % len(args.repeats)] for i in range(args.num_requests)]


def tokenize(tokenizer, texts: list[str], workers: int) -> list[list[int]]:
    """Token ids of every text; `workers` threads when more than one (0 and 1 tokenise inline)."""
    if workers <= 1:
        return [tokenizer.encode(t) for t in texts]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(tokenizer.encode, texts))


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_once(engine: Engine, args, tokenizer, texts, pretokenized) -> dict:
    """One measured run; returns per-request timings and totals."""
    params = SamplingParams(max_new_tokens=args.max_new_tokens, ignore_eos=args.no_stop_on_eos)
    interval_ns = int(args.submit_interval_ms * 1e6) if args.mode == "online" else 0
    engine.stats.update(decode_ns=0, prefill_ns=0, decode_steps=0, decode_kv_tokens=0)
    _sync(args.device)
    steplog.run_start()  # the step log marks where each run (warm-up or measured) begins
    t0 = tracing.now_ns()
    prompts = pretokenized if pretokenized is not None else tokenize(tokenizer, texts, args.tokenize_workers)
    seqs = []
    next_submit = 0
    while next_submit < len(prompts) or engine.has_unfinished():
        now = tracing.now_ns()
        while next_submit < len(prompts) and now >= t0 + next_submit * interval_ns:
            seqs.append(
                engine.add_request(prompts[next_submit], params, arrival_ns=t0 + next_submit * interval_ns)
            )
            next_submit += 1
        if engine.has_unfinished():
            engine.step()
        elif next_submit < len(prompts):
            time.sleep(max(0.0, (t0 + next_submit * interval_ns - tracing.now_ns()) / 1e9))
    _sync(args.device)
    total_ns = tracing.now_ns() - t0
    stats = engine.stats
    return {
        "seqs": seqs,
        "total_ns": total_ns,
        "decode_ns": stats["decode_ns"],
        "decode_steps": stats["decode_steps"],
        "decode_kv_tokens": stats["decode_kv_tokens"],
    }


def _pct(values, q) -> float:
    return float(np.percentile(values, q)) if len(values) else float("nan")


def summarize(run: dict) -> dict:
    seqs = run["seqs"]
    completion = sum(len(s.output_ids) for s in seqs)
    prompt_tokens = sum(len(s.prompt_ids) for s in seqs)
    ttft = [(s.token_ns[0] - s.arrival_ns) / 1e6 for s in seqs]
    tpot = [
        (s.token_ns[-1] - s.token_ns[0]) / 1e6 / (len(s.token_ns) - 1) for s in seqs if len(s.token_ns) > 1
    ]
    itl = [d / 1e6 for s in seqs for d in np.diff(s.token_ns)]
    latency = [(s.token_ns[-1] - s.arrival_ns) / 1e6 for s in seqs]
    total_s, decode_s = run["total_ns"] / 1e9, max(run["decode_ns"], 1) / 1e9
    return {
        "completion_tokens": completion,
        "prompt_tokens": prompt_tokens,
        "total_s": total_s,
        "decode_s": decode_s,
        "decode_tok_s": completion / decode_s,
        "decode_steps": run["decode_steps"],
        "decode_kv_tokens": run["decode_kv_tokens"],
        "total_tok_s": completion / total_s,
        "total_with_prompt_tok_s": (completion + prompt_tokens) / total_s,
        "ttft_ms": {q: _pct(ttft, q) for q in (50, 95, 99)},
        "tpot_ms": {q: _pct(tpot, q) for q in (50, 95, 99)},
        "itl_ms": {q: _pct(itl, q) for q in (50, 95, 99)},
        "latency_ms": {q: _pct(latency, q) for q in (50, 95, 99)},
    }


def _p50_mean(values: list[float]) -> str:
    return f"p50 {np.median(values):.3f}  mean {np.mean(values):.3f}"


def report(args, runs: list[dict], warmups: int, hf: dict | None, floor: dict | None = None) -> dict:
    print(
        f"model={args.hf_model_id} device={args.device} dtype={args.dtype} mode={args.mode} "
        f"requests={args.num_requests} max_new_tokens={args.max_new_tokens} batch={args.max_batch_size}"
    )
    threads = getattr(args, "threads_used", None)
    if threads is not None:
        print(f"cpu threads: {threads[0]} ({threads[1]})")
    print(f"runs: warmup={warmups} measured={len(runs)}")
    print(
        f"decode time (s):      {_p50_mean([r['decode_s'] for r in runs])}  (steps {runs[0]['decode_steps']})"
    )
    print(f"total time (s):       {_p50_mean([r['total_s'] for r in runs])}")
    print(f"throughput decode (completion tok/s): {_p50_mean([r['decode_tok_s'] for r in runs])}")
    print(f"throughput total  (completion tok/s): {_p50_mean([r['total_tok_s'] for r in runs])}")
    print(
        f"throughput total  (prompt+completion tok/s): {_p50_mean([r['total_with_prompt_tok_s'] for r in runs])}"
    )
    med = lambda key, q: float(np.median([r[key][q] for r in runs]))  # noqa: E731
    for key, label in (
        ("ttft_ms", "TTFT"),
        ("tpot_ms", "TPOT"),
        ("itl_ms", "ITL"),
        ("latency_ms", "latency"),
    ):
        print(f"{label:8s} (ms): p50 {med(key, 50):.3f}  p95 {med(key, 95):.3f}  p99 {med(key, 99):.3f}")
    result = {"args": {k: v for k, v in vars(args).items() if k != "repeats"}, "runs": runs, "hf": hf}
    if floor is not None:
        fractions = [floor["seconds"](r) / r["decode_s"] for r in runs]
        print(
            f"HBM floor: copy bandwidth {floor['bandwidth'] / 1e9:.0f} GB/s, weights {floor['weight_bytes'] / 1e6:.0f} MB "
            f"per step; decode runs at {np.median(fractions):.1%} of the floor's speed (floor time / decode time, p50)"
        )
        result["hbm_floor"] = {
            "copy_bandwidth_bytes_s": floor["bandwidth"],
            "weight_bytes": floor["weight_bytes"],
            "kv_bytes_per_token": floor["kv_bytes_per_token"],
            "floor_decode_s": [floor["seconds"](r) for r in runs],
            "fraction_of_floor": fractions,
        }
    if hf is not None:
        # Hugging Face's time is its whole generate (its prefill included): the like-for-like ratio is our total
        # throughput; the decode-only ratio is printed beside it.
        ours = float(np.median([r["total_tok_s"] for r in runs]))
        ours_decode = float(np.median([r["decode_tok_s"] for r in runs]))
        print(
            f"hf generate (completion tok/s): {hf['tok_s']:.1f}  ours/hf: {ours / hf['tok_s']:.2f}x total, "
            f"{ours_decode / hf['tok_s']:.2f}x decode"
        )
        result["speedup_vs_hf"] = ours / hf["tok_s"]
        result["decode_speedup_vs_hf"] = ours_decode / hf["tok_s"]
    return result


def hbm_floor(engine: Engine) -> dict:
    """What `roseinfer.bench.roofline` needs to put each run against the HBM-bandwidth floor of its decode steps."""
    from roseinfer.bench import roofline

    bandwidth = roofline.copy_bandwidth(engine.device)
    return {
        "bandwidth": bandwidth,
        "weight_bytes": roofline.weight_bytes(engine.model),
        "kv_bytes_per_token": roofline.kv_bytes_per_token(engine.model),
        "seconds": lambda run: roofline.decode_floor_seconds(
            engine.model, run["decode_steps"], run["decode_kv_tokens"], bandwidth
        ),
    }


def main(prog: str, description: str, default_mode: str, argv: list[str] | None = None) -> int:
    args = parse(build_parser(prog, description, default_mode), argv)
    try:
        engine = Engine(args.hf_model_id, engine_config(args))
    except (ValueError, TypeError) as e:
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    args.threads_used = engine.runner.cpu_threads  # (count, reason) on CPU, None elsewhere
    tokenizer = load_tokenizer(args.hf_model_id)
    texts = prompt_texts(args)
    pretokenized = tokenize(tokenizer, texts, args.tokenize_workers) if args.pretok else None
    try:
        for _ in range(args.warmup_runs):
            run_once(engine, args, tokenizer, texts, pretokenized)
        runs = [
            summarize(run_once(engine, args, tokenizer, texts, pretokenized)) for _ in range(args.repeat_runs)
        ]
    except ValueError as e:  # e.g. a prompt longer than the model's positions
        print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    hf = None
    if args.compare_hf:
        from roseinfer.bench.hf_reference import hf_generate, to_hf

        hf_model = to_hf(engine.model)
        prompts = pretokenized or tokenize(tokenizer, texts, 1)
        # Warm up at full length: Hugging Face's first long generate on a GPU ran 8x slower than the next
        # (917 vs 7,764 tok/s on an H100, docs/BENCHMARKS.md), so a short warm-up would flatter us.
        hf_generate(hf_model, prompts[: args.max_batch_size], args.max_new_tokens, args.max_batch_size)
        times = [
            hf_generate(hf_model, prompts, args.max_new_tokens, args.max_batch_size)
            for _ in range(args.repeat_runs)
        ]
        med = sorted(times, key=lambda t: t["seconds"])[len(times) // 2]
        hf = {"seconds": med["seconds"], "tok_s": med["completion_tokens"] / med["seconds"]}
    result = report(
        args, runs, args.warmup_runs, hf, hbm_floor(engine) if engine.device.type == "cuda" else None
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2)
    return 0
