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
        "--no-cuda-mlp",
        action="store_true",
        help="Triton path: the one-row MLP as two Triton kernels, not one CUDA kernel",
    )
    p.add_argument(
        "--no-cuda-attn",
        action="store_true",
        help="Triton path: the one-row attention half as three Triton kernels, not one CUDA kernel",
    )
    p.add_argument(
        "--no-cutlass-gemm",
        action="store_true",
        help="cuBLAS for the linears at 33 to 512 rows (128 beyond 768 wide), not the CUTLASS GEMM that loads "
        "its weights early (and the step on one stream)",
    )
    p.add_argument(
        "--no-cuda-paged-attn",
        action="store_true",
        help="Triton path: the paged-attention decode as the Triton kernel, not the CUDA one of bulk copies",
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
        choices=["nccl", "symm_mem", "fused"],
        help="symm_mem: torch's NVLink all-reduce; fused: at batch 1 no collective kernel, the GEMVs push their "
        "partial sums over NVLink and the next GEMV adds them",
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
        cuda_mlp=not args.no_cuda_mlp,
        cuda_attn=not args.no_cuda_attn,
        cutlass_gemm=not args.no_cutlass_gemm,
        cuda_paged_attn=not args.no_cuda_paged_attn,
        paged_attn=args.paged_attn,
        cuda_graph=args.cuda_graph,
        cpu_threads=args.cpu_threads,
        tensor_parallel_size=args.tensor_parallel_size,
        tp_allreduce=args.tp_allreduce,
    )
