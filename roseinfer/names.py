"""The engine's names, the facts roseprof reads runs by: region names, environment switches, the step log's
format version. Torch-free and import-free, so roseprof imports this module (not a mirror of it) and reading a
stored run never imports torch: `import roseinfer.names` loads nothing else (roseinfer/__init__.py is lazy).

Region names are stable API (dashboards, diffs and users' scripts match on them).
"""

from __future__ import annotations

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
# The parts of the model's forward (eager steps, prefill, and while a decode step is captured in a CUDA graph, so
# that a replay's kernels can be attributed to them): the token and position embeddings; per layer the attention
# (QKV projection, KV append, attention, output projection), every residual add + LayerNorm (ln_1, ln_2, and the
# final ln_f) and the MLP; then the lm_head GEMM and the greedy argmax (in a graph also the next step's inputs
# written from it).
EMBEDDING = "roseinfer.embedding"
ATTENTION = "roseinfer.layer.attention"
LAYERNORM = "roseinfer.layer.layernorm"
MLP = "roseinfer.layer.mlp"
LM_HEAD = "roseinfer.lm_head"
ARGMAX = "roseinfer.argmax"
# Tensor parallelism: the sum over the ranks of a row-parallel projection's partial outputs, one inside the
# attention (after its output projection) and one inside the MLP of every layer. Open while a decode step is
# captured, so a graph replay's NCCL kernels are attributed to it (roseinfer/distributed.py).
ALLREDUCE = "roseinfer.layer.allreduce"
# Regions inside a fused kernel (issue 50): GPU sub-ranges of one kernel launch, read from the %globaltimer stamps
# its blocks write (roseinfer/cuda_ext), named under the region the kernel replaces. The one-row fused MLP's phases:
MLP_WAIT = "roseinfer.layer.mlp.wait"  # its weights loaded, waiting for the kernel in front (PDL)
MLP_NORM = "roseinfer.layer.mlp.norm"  # ln_2: the residual add and LayerNorm
MLP_UP = "roseinfer.layer.mlp.up"  # c_fc with GPT-2's GELU (one pass: the GELU is the GEMV's epilogue)
MLP_DOWN = "roseinfer.layer.mlp.down"  # mlp_proj: each block's share of every output column (its rows of K)
MLP_SUM = "roseinfer.layer.mlp.sum"  # the blocks' shares added into the output (atomics)
# The one-row fused attention half's phases (a cluster of blocks per head):
ATTN_WAIT = "roseinfer.layer.attention.wait"  # weights and the past tokens' K/V loaded, waiting (PDL)
ATTN_NORM = "roseinfer.layer.attention.norm"  # ln_1: the residual add and LayerNorm
ATTN_QKV = (
    "roseinfer.layer.attention.qkv"  # c_attn, the new q/k/v pushed to the head's blocks (until all arrive)
)
ATTN_ATTEND = (
    "roseinfer.layer.attention.attend"  # each block's tokens' partial softmax, pushed (until all arrive)
)
ATTN_PROJ = "roseinfer.layer.attention.proj"  # the partials combined, attn_proj's columns added (atomics)
# The fused all-reduce's reader (tensor parallelism at one row, `roseinfer.fused_allreduce`): the GEMV after a
# row-parallel projection, which waits for every rank's partial sum, adds them and runs the next LayerNorm and
# linear (c_fc, c_attn or the lm_head). Its phases: its weights loaded, waiting for the kernel in front (PDL); its
# own rank's sum is in, the other ranks' rows arriving (the ranks' skew and NVLink's latency); the rows added, the
# LayerNorm and the linear that reads them
ALLREDUCE_WAIT = "roseinfer.layer.allreduce.wait"
ALLREDUCE_PEERS = "roseinfer.layer.allreduce.peers"
ALLREDUCE_GEMV = "roseinfer.layer.allreduce.gemv"
KERNEL_REGION_NAMES = (MLP_WAIT, MLP_NORM, MLP_UP, MLP_DOWN, MLP_SUM)
ATTN_KERNEL_REGION_NAMES = (ATTN_WAIT, ATTN_NORM, ATTN_QKV, ATTN_ATTEND, ATTN_PROJ)
ALLREDUCE_KERNEL_REGION_NAMES = (ALLREDUCE_WAIT, ALLREDUCE_PEERS, ALLREDUCE_GEMV)
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
# The regions a decode step is broken down into (dashboards stack them per step), in display order.
STEP_BREAKDOWN = (
    BUILD_BLOCK_TABLES,
    H2D_BLOCK_TABLES,
    MODEL_FORWARD,
    RESERVE_BLOCKS_AHEAD,
    KV_APPEND,
    SAMPLE,
)


# The environment switches the engine reads (roseinfer/env.py types and reads them; roseprof records them all
# with a run and sets the first ones for a capture).
ROSEINFER_NVTX = "ROSEINFER_NVTX"
ROSEINFER_RECORD_FUNCTION = "ROSEINFER_RECORD_FUNCTION"
ROSEINFER_STEP_LOG = "ROSEINFER_STEP_LOG"
# 1: each region's own host (and CPU) time per decode step in the step log always (tracing.set_region_clocks), not
# only while a profiler or a capture window has the regions on
ROSEINFER_REGION_CLOCKS = "ROSEINFER_REGION_CLOCKS"
ROSELLM_TRITON_KV_APPEND = "ROSELLM_TRITON_KV_APPEND"
ROSELLM_TRITON_KV_APPEND_MIN_BATCH = "ROSELLM_TRITON_KV_APPEND_MIN_BATCH"
ROSEINFER_TEST_SLEEP_REGION = "ROSEINFER_TEST_SLEEP_REGION"  # tests only: an injected sleep
ROSEINFER_TEST_BUSY_REGION = "ROSEINFER_TEST_BUSY_REGION"  # tests only: an injected busy loop (CPU time)
ROSEINFER_TEST_SLEEP_RANK = (
    "ROSEINFER_TEST_SLEEP_RANK"  # tests only: the one rank that sleeps (all when unset)
)
ROSEINFER_TEST_FAIL_STEP = (
    "ROSEINFER_TEST_FAIL_STEP"  # tests only: the engine's step raises from this decode step
)
ROSEINFER_TEST_FAIL_WINDOW_RANK = (
    "ROSEINFER_TEST_FAIL_WINDOW_RANK"  # tests only: this rank's capture windows fail (their export raises)
)
ROSEINFER_TEST_SLOW_EVERY = (
    "ROSEINFER_TEST_SLOW_EVERY"  # tests only: the sleep or busy region slows only its every Nth entry
)
ROSEINFER_TORCH_PROFILE = (
    "ROSEINFER_TORCH_PROFILE"  # DIR: the engine runs torch.profiler, writes DIR/trace.json.gz
)
ROSEINFER_TORCH_PROFILE_SCHEDULE = "ROSEINFER_TORCH_PROFILE_SCHEDULE"  # "wait,warmup,active" in decode steps
ROSEINFER_TORCH_PROFILE_WITH_STACK = "ROSEINFER_TORCH_PROFILE_WITH_STACK"
ROSEINFER_TORCH_PROFILE_CPU_ONLY = "ROSEINFER_TORCH_PROFILE_CPU_ONLY"
# where roseinfer/cuda_ext builds its CUDA C++ (default ~/.cache/roseinfer/cuda_ext)
ROSEINFER_CUDA_EXT_CACHE = "ROSEINFER_CUDA_EXT_CACHE"
# FILE: where a CUDA kernel's host code appends each launch's stamps (roseinfer/cuda_ext/stamps.py), one JSON line a
# launch; a roseprof capture sets it to the run folder's file, as it does the step log
ROSEINFER_KERNEL_STAMPS = "ROSEINFER_KERNEL_STAMPS"
# DIR: the server runs under `roseprof nsys --capture-range nvtx --capture-range-end repeat`, which makes DIR nsys'
# temporary folder, where nsys writes each recording range's stream (roseinfer/serve/nsys_window.py)
ROSEINFER_NSYS_WINDOWS = "ROSEINFER_NSYS_WINDOWS"
ENV_KEYS = (
    ROSEINFER_NVTX,
    ROSEINFER_RECORD_FUNCTION,
    ROSEINFER_STEP_LOG,
    ROSEINFER_REGION_CLOCKS,
    ROSEINFER_TORCH_PROFILE,
    ROSEINFER_TORCH_PROFILE_SCHEDULE,
    ROSEINFER_TORCH_PROFILE_WITH_STACK,
    ROSEINFER_TORCH_PROFILE_CPU_ONLY,
    ROSELLM_TRITON_KV_APPEND,
    ROSELLM_TRITON_KV_APPEND_MIN_BATCH,
    ROSEINFER_TEST_SLEEP_REGION,
    ROSEINFER_TEST_BUSY_REGION,
    ROSEINFER_TEST_SLEEP_RANK,
    ROSEINFER_TEST_FAIL_STEP,
    ROSEINFER_TEST_FAIL_WINDOW_RANK,
    ROSEINFER_TEST_SLOW_EVERY,
    ROSEINFER_CUDA_EXT_CACHE,
    ROSEINFER_KERNEL_STAMPS,
    ROSEINFER_NSYS_WINDOWS,
)
TORCH_PROFILE_SCHEDULE = (8, 2, 128)  # the engine's default torch.profiler window: wait, warmup, active

KERNEL_STAMPS_VERSION = 1  # the stamps file's format (roseinfer/cuda_ext/stamps.py writes it)
STEPLOG_VERSION = 5  # the step log's format (roseinfer/steplog.py writes it; roseprof reads up to it)

# Capture windows (roseinfer serve --enable-profiling; roseinfer/serve/windows.py): the tools a window takes and the
# files a closed window serves (GET /profile/files/NAME); roseprof live reads them by these names.
WINDOW_TOOLS = ("steps", "torch", "nsys")
WINDOW_STEPS_FILE = "steps.jsonl"  # the flight recorder's records of the window's steps, meta first
WINDOW_TRACE_FILE = "trace.json.gz"  # torch: the window's Kineto trace

WINDOW_NSYS_FILE = (
    "trace.qdstrm"  # nsys: the window's recording range as nsys wrote it (its importer reads it)
)
# nsys: the NVTX range a window opens on the engine's loop thread; `roseprof nsys --capture-range-end repeat` makes it
# nsys' --nvtx-capture, so nsys records from its push to its pop, once per window
WINDOW_RANGE = "roseinfer.capture_window"


def window_rank_file(name: str, rank: int) -> str:
    """Tensor-parallel rank r's copy of a window file (roseinfer/serve/rank_windows.py): `steps.jsonl` ->
    `steps.rank1.jsonl`, `trace.json.gz` -> `trace.rank1.json.gz` (rank 0 keeps the name; roseprof finds a rank's
    step log beside rank 0's by that name)."""
    if rank == 0:
        return name
    stem, dot, rest = name.partition(".")
    return f"{stem}.rank{rank}{dot}{rest}"
