"""roseinfer as roseprof sees it: its region names, its step breakdown, its switches, its default command.

These mirror `roseinfer.tracing` and `roseinfer.env` (a test checks that they agree) rather than importing
them, so reading a stored run never imports the engine (nor torch).
"""

from __future__ import annotations

import sys

# Region names (stable API, as in roseinfer.tracing).
DECODE_STEP = "roseinfer.decode_step"
BUILD_BLOCK_TABLES = "roseinfer.decode_step_sessions.build_block_tables"
H2D_BLOCK_TABLES = "roseinfer.decode_step_sessions.h2d_block_tables"
# Static decode, blocks reserved ahead: the next blocks allocated right after a step's launch, off the path from the
# previous step's tokens to the next launch (roseinfer/decode_slots.py).
RESERVE_BLOCKS_AHEAD = "roseinfer.decode_step_sessions.reserve_blocks_ahead"
MODEL_FORWARD = "roseinfer.model.forward"
KV_APPEND = "roseinfer.kv.append_token"
PREFILL = "roseinfer.prefill"
SAMPLE = "roseinfer.sample"
SCHEDULER_STEP = "roseinfer.scheduler.step"
# The model's parts, open in eager steps and while a decode step is captured in a CUDA graph (graph-replayed
# kernels are attributed to them through the trace's graph nodes).
EMBEDDING = "roseinfer.embedding"
ATTENTION = "roseinfer.layer.attention"
LAYERNORM = "roseinfer.layer.layernorm"
MLP = "roseinfer.layer.mlp"
LM_HEAD = "roseinfer.lm_head"
ARGMAX = "roseinfer.argmax"
# Tensor parallelism: the all-reduce of a row-parallel projection (inside attention and inside the MLP of every
# layer); its NCCL kernels, replayed or not, land in it.
ALLREDUCE = "roseinfer.layer.allreduce"
REGION_NAMES = (
    DECODE_STEP,
    BUILD_BLOCK_TABLES,
    H2D_BLOCK_TABLES,
    MODEL_FORWARD,
    KV_APPEND,
    PREFILL,
    SAMPLE,
    SCHEDULER_STEP,
    EMBEDDING,
    ATTENTION,
    LAYERNORM,
    MLP,
    LM_HEAD,
    ARGMAX,
    RESERVE_BLOCKS_AHEAD,
    ALLREDUCE,
)
# An NVTX mark at a KV-block rollover: without a step log, a step that contains one is a rollover step.
ROLLOVER_MARK = "roseinfer.kv.rollover"

# The parts of a decode step, in the order the per-step breakdown stacks them: (short label, region).
STEP_BREAKDOWN = (
    ("build_block_tables", BUILD_BLOCK_TABLES),
    ("h2d", H2D_BLOCK_TABLES),
    ("forward", MODEL_FORWARD),
    ("reserve_ahead", RESERVE_BLOCKS_AHEAD),
    ("kv.append", KV_APPEND),
    ("sample", SAMPLE),
)

# The engine's switches (roseinfer.env): captures set the first three; the manifest records them all.
NVTX_ENV = "ROSEINFER_NVTX"
RECORD_FUNCTION_ENV = "ROSEINFER_RECORD_FUNCTION"
STEP_LOG_ENV = "ROSEINFER_STEP_LOG"
TORCH_PROFILE_ENV = "ROSEINFER_TORCH_PROFILE"  # DIR: the engine runs torch.profiler, writes DIR/trace.json.gz
TORCH_PROFILE_SCHEDULE_ENV = "ROSEINFER_TORCH_PROFILE_SCHEDULE"  # "wait,warmup,active" in decode steps
TORCH_PROFILE_WITH_STACK_ENV = "ROSEINFER_TORCH_PROFILE_WITH_STACK"
TORCH_PROFILE_CPU_ONLY_ENV = "ROSEINFER_TORCH_PROFILE_CPU_ONLY"
TORCH_PROFILE_SCHEDULE = (8, 2, 128)  # the engine's default window
ENV_KEYS = (
    NVTX_ENV,
    RECORD_FUNCTION_ENV,
    STEP_LOG_ENV,
    TORCH_PROFILE_ENV,
    TORCH_PROFILE_SCHEDULE_ENV,
    TORCH_PROFILE_WITH_STACK_ENV,
    TORCH_PROFILE_CPU_ONLY_ENV,
    "ROSELLM_TRITON_KV_APPEND",
    "ROSELLM_TRITON_KV_APPEND_MIN_BATCH",
    "ROSEINFER_TEST_SLEEP_REGION",  # tests only: an injected sleep; a run that had one must say so
)


def default_command(device: str | None = None) -> list[str]:
    """The built-in engine benchmark, sized for the machine: tens of seconds on CPU; on a GPU, GPT-2 small on the
    fast path users run (`--paged-attn --cuda-graph`: the Triton attention kernel, each decode step one CUDA graph
    replay, whose kernels roseprof attributes to the regions open when the graph was captured)."""
    if device is None:
        try:
            import torch

            device = "cuda" if torch.cuda.is_available() else "cpu"
        except ImportError:
            device = "cpu"
    if device == "cuda":
        return _benchmark("gpt2", "cuda", 64, 256, "--paged-attn", "--cuda-graph")
    return _benchmark("gpt2-tiny", "cpu", 16, 320)


def ncu_default_command() -> list[str]:
    """The engine benchmark for `roseprof ncu`: GPT-2 small on the GPU, a few decode steps, eager (ncu's NVTX filter
    sees the ranges around kernels launched one by one, not around CUDA-graph replays), with the Triton
    paged-attention decode kernel and the Triton KV-append kernel (its batch threshold lowered to 1, so it runs at
    this small batch). With a kernel or NVTX filter and roseprof's launch cap, a full-set profile of the chosen
    kernels takes minutes."""
    return ["env", "ROSELLM_TRITON_KV_APPEND_MIN_BATCH=1", *_benchmark("gpt2", "cuda", 8, 16, "--paged-attn")]


def _benchmark(model: str, device: str, requests: int, new_tokens: int, *options: str) -> list[str]:
    """One run of the streaming benchmark, no warm-up, every request to its full length, batch = requests."""
    return [
        sys.executable,
        "-m",
        "roseinfer.benchmark_streaming",
        "--hf-model-id",
        model,
        "--device",
        device,
        "--num-requests",
        str(requests),
        "--max-batch-size",
        str(requests),
        "--max-new-tokens",
        str(new_tokens),
        "--warmup-runs",
        "0",
        "--repeat-runs",
        "1",
        "--no-stop-on-eos",
        "--mode",
        "online",
        *options,
    ]
