"""Shared by `python -m roseinfer.benchmark_scheduler` and `python -m roseinfer.benchmark_streaming`.

Both build the same engine from the same flags, run warmup and measured runs, and print the same report:
decode and total time, throughput (completion tokens/s over decode time and over total time), TTFT, TPOT,
ITL p50/p95/p99 and latency. `--compare-hf` also times Hugging Face `generate` on the same weights and
prompts, in the same process, and prints the ratio.

`--tensor-parallel-size N` runs the engine on N ranks: started here (N processes on this machine) or by torchrun
(`torchrun --nproc-per-node N -m roseinfer.benchmark_scheduler --tensor-parallel-size N ...`, and across nodes
with `--nnodes`). Every rank runs the same requests; rank 0 prints and writes the results.
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import torch

from roseinfer import distributed, steplog, tracing
from roseinfer.bench import roofline

# The flags live in options.py; named here too, as the benchmarks and tests call them.
from roseinfer.bench.options import (  # noqa: F401
    DEFAULT_PROMPT,
    build_parser,
    default_device,
    engine_config,
    parse,
)
from roseinfer.config import EngineConfig
from roseinfer.engine import Engine
from roseinfer.frozen_heap import freeze_startup_heap
from roseinfer.sequence import SamplingParams
from roseinfer.tokenizer import load_tokenizer


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


def run_once(engine: Engine, args, tokenizer, texts, pretokenized, warmup: bool = False) -> dict:
    """One run (measured, or a warm-up); returns per-request timings and totals."""
    params = SamplingParams(max_new_tokens=args.max_new_tokens, ignore_eos=args.no_stop_on_eos)
    interval_ns = int(args.submit_interval_ms * 1e6) if args.mode == "online" else 0
    engine.stats.update(decode_ns=0, prefill_ns=0, decode_steps=0, decode_kv_tokens=0)
    _sync(args.device)
    steplog.run_start(warmup)  # the step log marks where each run (warm-up or measured) begins
    t0 = tracing.now_ns()
    prompts = pretokenized if pretokenized is not None else tokenize(tokenizer, texts, args.tokenize_workers)
    seqs = []
    next_submit = 0
    # With tensor parallelism every rank must admit the same requests in the same step: rank 0's clock says which
    # have arrived (one small broadcast per loop on the host group; none without an arrival interval).
    tp = engine.runner.tp if interval_ns else None
    while next_submit < len(prompts) or engine.has_unfinished():
        now = tracing.now_ns()
        arrived = next_submit
        while arrived < len(prompts) and now >= t0 + arrived * interval_ns:
            arrived += 1
        if tp is not None:
            arrived = tp.broadcast_int(arrived)
        while next_submit < arrived:
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
    # Two lines, each within 80 columns: the first thing `roseprof nsys` shows in a user's terminal.
    print(f"model={args.hf_model_id} device={args.device} dtype={args.dtype} mode={args.mode}")
    print(f"requests={args.num_requests} max_new_tokens={args.max_new_tokens} batch={args.max_batch_size}")
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
            f"HBM floor{' per GPU' if args.tensor_parallel_size > 1 else ''}: copy bandwidth "
            f"{floor['bandwidth'] / 1e9:.0f} GB/s, weights {floor['weight_bytes'] / 1e6:.0f} MB per step; decode runs at {np.median(fractions):.1%} of the floor's speed (floor time / decode time, p50)"
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


def main(
    prog: str, description: str, default_mode: str, argv: list[str] | None = None, freeze_heap: bool = False
) -> int:
    """freeze_heap: this process (and each rank started here) is the benchmark's alone, as under `python -m`: its
    start-up's objects are frozen once the engine is built (roseinfer.frozen_heap). An in-process call (a test)
    leaves its process's heap alone."""
    args = parse(build_parser(prog, description, default_mode), argv)
    if args.tensor_parallel_size > 1 and not distributed.under_torchrun():
        # Start the ranks here, each running this command, as torchrun would; what fails alike on every rank is
        # said once, before any starts.
        try:
            from roseinfer.sharding import check_ranks

            check_ranks(args.hf_model_id, args.tensor_parallel_size, args.device)
        except ValueError as e:
            print(f"{prog}: error: {e}", file=sys.stderr)
            return 2
        argv = sys.argv[1:] if argv is None else argv
        rank_args = (prog, description, default_mode, argv, freeze_heap)
        return distributed.launch(main, rank_args, args.tensor_parallel_size, EngineConfig.tp_timeout_s)
    try:
        return _run(prog, args, freeze_heap)
    except KeyboardInterrupt:  # Ctrl-C, or the SIGINT a capture forwards: a line, not a traceback
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    finally:
        distributed.destroy()  # under torchrun: leave the process group before exiting (nothing on one device)


def _run(prog: str, args, freeze_heap: bool) -> int:
    first_rank = os.environ.get("RANK", "0") == "0"  # errors and results are printed once, by rank 0
    try:
        engine = Engine(args.hf_model_id, engine_config(args))
    except (ValueError, TypeError) as e:
        if first_rank:
            print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    args.threads_used = engine.runner.cpu_threads  # (count, reason) on CPU, None elsewhere
    tokenizer = load_tokenizer(args.hf_model_id)
    if freeze_heap:
        freeze_startup_heap()  # as the server's engine core does (roseinfer.frozen_heap)
    texts = prompt_texts(args)
    pretokenized = tokenize(tokenizer, texts, args.tokenize_workers) if args.pretok else None
    try:
        for _ in range(args.warmup_runs):
            run_once(engine, args, tokenizer, texts, pretokenized, warmup=True)
        runs = [
            summarize(run_once(engine, args, tokenizer, texts, pretokenized)) for _ in range(args.repeat_runs)
        ]
    except ValueError as e:  # e.g. a prompt longer than the model's positions
        if first_rank:
            print(f"{prog}: error: {e}", file=sys.stderr)
        return 2
    if engine.rank != 0:
        return 0  # the other ranks ran the same steps; rank 0 reports them
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
        args, runs, args.warmup_runs, hf, roofline.hbm_floor(engine) if engine.device.type == "cuda" else None
    )
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(result, fh, indent=2)
    return 0
