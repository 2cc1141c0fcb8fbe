"""roseinfer as roseprof sees it: its region names, its step breakdown, its switches, its default command.

The names are the engine's own, imported from `roseinfer.names` (torch-free: importing it loads neither the
engine nor torch, roseinfer/__init__.py being lazy), so reading a stored run never imports torch and there is
no mirror to keep in agreement.
"""

from __future__ import annotations

import sys

from roseinfer import names
from roseinfer.names import (  # noqa: F401 - re-exported: roseprof names them as workload.roseinfer.X
    ALLREDUCE,
    ARGMAX,
    ATTENTION,
    BUILD_BLOCK_TABLES,
    DECODE_STEP,
    EMBEDDING,
    ENV_KEYS,
    H2D_BLOCK_TABLES,
    KERNEL_REGION_NAMES,
    KV_APPEND,
    LAYERNORM,
    LM_HEAD,
    MLP,
    MLP_DOWN,
    MLP_NORM,
    MLP_SUM,
    MLP_UP,
    MLP_WAIT,
    MODEL_FORWARD,
    PREFILL,
    REGION_NAMES,
    RESERVE_BLOCKS_AHEAD,
    SAMPLE,
    SCHEDULER_STEP,
    TORCH_PROFILE_SCHEDULE,
)

# An NVTX mark at a KV-block rollover: without a step log, a step that contains one is a rollover step.
ROLLOVER_MARK = "roseinfer.kv.rollover"

# The parts of a decode step, in the order the per-step breakdown stacks them (the engine's STEP_BREAKDOWN):
# (short label, region); the labels are roseprof's, for narrow columns.
STEP_LABELS = {
    BUILD_BLOCK_TABLES: "build_block_tables",
    H2D_BLOCK_TABLES: "h2d",
    MODEL_FORWARD: "forward",
    RESERVE_BLOCKS_AHEAD: "reserve_ahead",
    KV_APPEND: "kv.append",
    SAMPLE: "sample",
}
STEP_BREAKDOWN = tuple((STEP_LABELS[region], region) for region in names.STEP_BREAKDOWN)

# The engine's switches: captures set these (the manifest records all of ENV_KEYS).
NVTX_ENV = names.ROSEINFER_NVTX
RECORD_FUNCTION_ENV = names.ROSEINFER_RECORD_FUNCTION
STEP_LOG_ENV = names.ROSEINFER_STEP_LOG
TORCH_PROFILE_ENV = (
    names.ROSEINFER_TORCH_PROFILE
)  # DIR: the engine runs torch.profiler, writes DIR/trace.json.gz
TORCH_PROFILE_SCHEDULE_ENV = names.ROSEINFER_TORCH_PROFILE_SCHEDULE  # "wait,warmup,active" in decode steps
TORCH_PROFILE_WITH_STACK_ENV = names.ROSEINFER_TORCH_PROFILE_WITH_STACK
TORCH_PROFILE_CPU_ONLY_ENV = names.ROSEINFER_TORCH_PROFILE_CPU_ONLY
# FILE: where a fused kernel's host code appends its launches' stamps (roseinfer/cuda_ext/stamps.py); read by
# workload/kernel_stamps.py into GPU ranges named KERNEL_REGION_NAMES (roseinfer.layer.mlp.wait, .norm, .up, ...)
KERNEL_STAMPS_ENV = names.ROSEINFER_KERNEL_STAMPS
# The switches a capture sets itself (per tool, or a path per run): they never tell two runs' programs apart.
CAPTURE_ENV = frozenset(
    {NVTX_ENV, RECORD_FUNCTION_ENV, STEP_LOG_ENV, TORCH_PROFILE_ENV, TORCH_PROFILE_SCHEDULE_ENV,
     TORCH_PROFILE_WITH_STACK_ENV, TORCH_PROFILE_CPU_ONLY_ENV, KERNEL_STAMPS_ENV}
)  # fmt: skip


def default_command(device: str | None = None) -> list[str]:
    """The built-in engine benchmark, sized for the machine: tens of seconds on CPU; on a GPU, GPT-2 small on the
    fast path users run (`--paged-attn --cuda-graph`: the paged-attention kernels, each decode step one CUDA graph
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
    sees the ranges around kernels launched one by one, not around CUDA-graph replays), with the paged-attention
    decode kernel (`paged_attn_kernel` on Hopper where the CUDA one is built, the Triton `paged_decode_kernel`
    elsewhere: `--kernel paged` matches both) and the Triton KV-append kernel (its batch threshold lowered to 1, so it
    runs at this small batch). With a kernel or NVTX filter and roseprof's launch cap, a full-set profile of the chosen
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


# -- roseinfer serve, as `roseprof load` sees it ------------------------------------------------------------------
# Its streamed chunks carry, per choice, the token ids and each token's decode step (extensions to the OpenAI
# protocol; the response id is the engine's request id): what joins a client token to a server step (issue 49).
STREAM_TOKEN_IDS = "token_ids"
STREAM_TOKEN_STEPS = "token_steps"
# Its /metrics names follow vLLM's with its own prefix; the server-side TTFT histogram, ours and vLLM's, which a
# load compares with the client's TTFT (the gap: queueing outside the engine, HTTP and network).
SERVER_TTFT_HISTOGRAMS = ("roseinfer:time_to_first_token_seconds", "vllm:time_to_first_token_seconds")
# Its capture windows (--enable-profiling): the tools, and the files a closed window serves (roseprof/live/window.py).
WINDOW_TOOLS = names.WINDOW_TOOLS
WINDOW_STEPS_FILE = names.WINDOW_STEPS_FILE
WINDOW_TRACE_FILE = names.WINDOW_TRACE_FILE
window_rank_file = names.window_rank_file  # a tensor-parallel rank's window file (trace.rank1.json.gz)
WINDOW_NSYS_FILE = names.WINDOW_NSYS_FILE
# An nsys window: the NVTX range the server opens for it (nsys' --nvtx-capture), and the switch through which
# `roseprof nsys --capture-range-end repeat` tells the server where nsys writes each range (drivers/nsys/windows.py).
WINDOW_RANGE = names.WINDOW_RANGE
NSYS_WINDOWS_ENV = names.ROSEINFER_NSYS_WINDOWS
