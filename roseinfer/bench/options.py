"""The benchmarks' flags: the parser both `python -m roseinfer.benchmark_scheduler` and
`python -m roseinfer.benchmark_streaming` share, its checks, and the EngineConfig it builds."""

from __future__ import annotations

import argparse

import torch

from roseinfer.config import EngineConfig

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
    p.add_argument(
        "--block-size", type=int, default=64, help="tokens per KV block (a power of two with --paged-attn)"
    )
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
        "--no-gemv",
        action="store_true",
        help="earlier design: with --cuda-graph, the small batches' linears on cuBLAS, not the GEMV kernel",
    )
    p.add_argument(
        "--no-pdl",
        action="store_true",
        help="earlier design: with --cuda-graph, plain kernel launches, not programmatic dependent launches",
    )
    p.add_argument(
        "--no-split-attn",
        action="store_true",
        help="earlier design: with --cuda-graph --paged-attn, one attention program per head, not the past split "
        "over several",
    )
    p.add_argument(
        "--no-norm-gemv",
        action="store_true",
        help="earlier design: with --cuda-graph at batch 1, the residual add + LayerNorm as its own kernel, not in "
        "the GEMV's prologue",
    )
    p.add_argument(
        "--no-attn-prefetch",
        action="store_true",
        help="earlier design: with --cuda-graph --paged-attn at small batches, the split attention launched "
        "plainly, not as a dependent launch that loads its past block before it waits",
    )
    p.add_argument(
        "--no-early-release",
        action="store_true",
        help="earlier design: with --cuda-graph at batch 1, each GEMV lets the next kernel start after its own wait, "
        "not as it starts",
    )
    p.add_argument(
        "--no-embedding-gather",
        action="store_true",
        help="earlier design: with --cuda-graph at batch 1, the token and position embeddings looked up by their "
        "own kernels, not gathered by the first block's c_attn GEMV",
    )
    p.add_argument(
        "--no-lm-head-gemv",
        action="store_true",
        help="earlier design: with --cuda-graph at batch 1, ln_f as its own kernel and the lm_head on cuBLAS, not "
        "one GEMV kernel with the LayerNorm in its prologue",
    )
    p.add_argument(
        "--no-skinny-gemm",
        action="store_true",
        help="earlier design: with --cuda-graph, the linears of batches 9 to 32 on cuBLAS, not the skinny GEMM "
        "kernel (tensor cores, split-K in one kernel, PDL)",
    )
    p.add_argument(
        "--no-attn-chunks",
        action="store_true",
        help="earlier design: with --paged-attn, each attention program walks whole KV blocks on four warps with two "
        "pipeline stages at every batch, not 16 tokens at a time on one warp from 768 sequence x head pairs "
        "(where the attention releases no Triton attn_proj early) nor with a third stage below 256",
    )
    p.add_argument(
        "--no-pdl-64",
        action="store_true",
        help="earlier design: with --cuda-graph, plain kernel launches in the buckets of 33 to 64 rows for models "
        "up to GPT-2 small's width, not programmatic dependent launches",
    )
    p.add_argument(
        "--cpu-threads",
        type=int,
        default=None,
        metavar="N",
        help="CPU only: torch intra-op threads (default: OMP_NUM_THREADS if set, else 1 for models up to GPT-2 "
        "small, half the cores for wider ones; roseinfer/cpu_threads.py says why)",
    )
    # Tensor parallelism: N ranks (one device each), started here or by torchrun --nproc-per-node N.
    p.add_argument(
        "--tensor-parallel-size", type=int, default=1, metavar="N", help="ranks the model is split over"
    )
    p.add_argument(
        "--tp-allreduce",
        default="nccl",
        choices=["nccl", "symm_mem"],
        help="symm_mem: torch's NVLink all-reduce",
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
        "tensor_parallel_size",
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
    if args.compare_hf and args.tensor_parallel_size > 1:
        parser.error("--compare-hf runs Hugging Face on one device: use it with --tensor-parallel-size 1")
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
        gemv=not args.no_gemv,
        pdl=not args.no_pdl,
        split_attention=not args.no_split_attn,
        norm_gemv=not args.no_norm_gemv,
        attention_prefetch=not args.no_attn_prefetch,
        early_release=not args.no_early_release,
        embedding_gather=not args.no_embedding_gather,
        lm_head_gemv=not args.no_lm_head_gemv,
        skinny_gemm=not args.no_skinny_gemm,
        attention_chunks=not args.no_attn_chunks,
        pdl_64=not args.no_pdl_64,
        cpu_threads=args.cpu_threads,
        tensor_parallel_size=args.tensor_parallel_size,
        tp_allreduce=args.tp_allreduce,
    )
