"""The model shapes the engine knows (a built-in name or a checkpoint folder resolved to its shape) and the one
frozen engine configuration, validated once."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, fields


@dataclass(frozen=True)
class ModelConfig:
    """GPT-2 hyper-parameters (names follow Hugging Face's GPT2Config)."""

    vocab_size: int = 50257
    n_positions: int = 1024
    n_embd: int = 768
    n_layer: int = 12
    n_head: int = 12
    layer_norm_epsilon: float = 1e-5
    eos_token_id: int = 50256

    @property
    def head_dim(self) -> int:
        return self.n_embd // self.n_head


# Built-in names with the real GPT-2 shapes, plus a tiny one for quick CPU runs (random weights, seeded).
BUILTIN_MODELS: dict[str, ModelConfig] = {
    "gpt2": ModelConfig(n_embd=768, n_layer=12, n_head=12),
    "gpt2-medium": ModelConfig(n_embd=1024, n_layer=24, n_head=16),
    "gpt2-large": ModelConfig(n_embd=1280, n_layer=36, n_head=20),
    "gpt2-xl": ModelConfig(n_embd=1600, n_layer=48, n_head=25),
    "gpt2-tiny": ModelConfig(n_embd=128, n_layer=4, n_head=4),
}


def resolve_model_config(model: str) -> ModelConfig:
    """The shape of a built-in model or of a Hugging Face GPT-2 checkpoint folder (its config.json); what both the
    weight loader (`roseinfer.weights`) and the tensor-parallel checks (`roseinfer.sharding`) read."""
    if model in BUILTIN_MODELS:
        return BUILTIN_MODELS[model]
    if os.path.isdir(model):
        path = os.path.join(model, "config.json")
        if not os.path.isfile(path):
            raise ValueError(f"{model}: not a Hugging Face checkpoint folder (no config.json)")
        with open(path, encoding="utf-8") as fh:
            raw = json.load(fh)
        if raw.get("model_type") != "gpt2":
            raise ValueError(
                f"{model}: model_type is {raw.get('model_type')!r}, only GPT-2 checkpoints are supported"
            )
        return ModelConfig(
            vocab_size=raw["vocab_size"],
            n_positions=raw["n_positions"],
            n_embd=raw["n_embd"],
            n_layer=raw["n_layer"],
            n_head=raw["n_head"],
            layer_norm_epsilon=raw.get("layer_norm_epsilon", 1e-5),
            eos_token_id=raw.get("eos_token_id") if raw.get("eos_token_id") is not None else 50256,
        )
    if _looks_like_path(model):
        if os.path.exists(model):
            raise ValueError(f"{model}: not a folder (give a Hugging Face checkpoint folder)")
        hint = ""
        if model.startswith("~") and os.path.isdir(os.path.expanduser(model)):
            hint = " (~ is not expanded here: give the full path)"
        raise ValueError(f"no such folder: {model}{hint}")
    names = ", ".join(BUILTIN_MODELS)
    raise ValueError(f"unknown model {model!r}: give a GPT-2 checkpoint folder or one of {names}")


def _looks_like_path(model: str) -> bool:
    """A model argument meant as a folder: it has a path separator or starts with . or ~ (a bare word is a name)."""
    seps = [os.sep] + ([os.altsep] if os.altsep else []) + ["/"]
    return any(sep in model for sep in seps) or model.startswith((".", "~"))


@dataclass(frozen=True)
class EngineConfig:
    """Everything that shapes an engine; the `LLM(...)` keyword options and the benchmark flags map here."""

    device: str = "cpu"
    dtype: str = "float32"  # float32 | float16 | bfloat16
    seed: int = 0
    block_size: int = 64  # tokens per KV block
    num_blocks: int | None = (
        None  # the pool's blocks (one pool, every layer); None sizes it from max_batch_size and positions
    )
    max_batch_size: int = 16  # sequences decoded together
    prefill_max_batch_size: int = 16  # sequences prefilled together
    prefill_admission_policy: str = "fifo"  # fifo | shortest-first
    prefix_cache: bool = True  # share full prompt blocks between requests
    # Switches that bring back earlier designs (the regressions users plant to see roseprof find them):
    batched_kv_append: bool = True  # False: one append call per request per layer
    batched_rollover: bool = True  # False: a full last block sends that request down the slow path
    block_table_cache: bool = True  # False: block-table rows rebuilt from the lists every step
    # GPU fast path (CUDA only):
    paged_attn: bool = False  # Triton paged-attention decode kernel
    cuda_graph: bool = False  # capture the decode step in CUDA graphs for batch buckets
    # CUDA C++ kernels where they were measured faster than the Triton path (issue 50; `roseinfer.cuda_ext`, built
    # at first use): False (`--no-cuda-mlp`) keeps the Triton path, for the side-by-side measurement
    cuda_mlp: bool = True  # the captured one-row step's 768-wide MLP as one split-K CUDA kernel
    cuda_attn: bool = (
        True  # ... and its attention half as one CUDA kernel, a cluster per head (--no-cuda-attn)
    )
    # ... and the captured step's linears at 33 to 512 rows (128 for models wider than 768) as a CUTLASS GEMM that
    # loads its weights before its PDL wait (needs the nvidia-cutlass wheel; --no-cutlass-gemm: cuBLAS, as before)
    cutlass_gemm: bool = True
    # ... and under --paged-attn the decode attention where the one-pass kernel runs (from 64 sequence x head
    # pairs) as a CUDA kernel whose K/V tiles come by bulk copy (--no-cuda-paged-attn: the Triton kernel)
    cuda_paged_attn: bool = True
    # The captured step's kernels (the GEMV, the skinny GEMM, programmatic dependent launches, the split attention
    # and the rest, each measured faster than the design before it: docs/BENCHMARKS.md, issue 27) are not switches:
    # `roseinfer.graph_kernels.GraphKernels` records them, and scripts/bench_graph_step.py rebuilds the earlier
    # designs through it.
    # CPU only: torch's intra-op threads for this process. None chooses (roseinfer/cpu_threads.py): OMP_NUM_THREADS
    # when set, else 1 for models up to GPT-2 small's width, half the usable cores for wider ones. torch's default
    # (one thread per core) collapses when other processes compete for the cores.
    cpu_threads: int | None = None
    # Tensor parallelism (roseinfer/distributed.py): ranks, each a process with one device holding its heads and
    # MLP columns. 1: one device, no process group, no collective.
    tensor_parallel_size: int = 1
    # Seconds a rank waits in a collective (or the rendezvous) before it fails: a rank that died stops the others.
    tp_timeout_s: float = 300.0
    # The decode step's all-reduce: "nccl" (torch.distributed's, NCCL on CUDA, gloo on CPU), "symm_mem" (CUDA,
    # bfloat16 or float32: torch's symmetric-memory two-shot all-reduce over NVLink for messages up to a decode
    # batch, the GEMM writing into its buffer; NCCL beyond), or "fused" (CUDA: at one row inside the captured step
    # no collective kernel, the GEMVs push their partial sums to every rank and the next GEMV sums them,
    # roseinfer/fused_allreduce.py; NCCL elsewhere).
    tp_allreduce: str = "nccl"
    # The flight recorder (roseinfer/flight_recorder.py): the step log's records of the last N decode steps, kept in
    # memory for `GET /debug/steps` (roseinfer serve turns it on). 0: off.
    flight_recorder_steps: int = 0

    def __post_init__(self) -> None:
        for name in ("block_size", "max_batch_size", "prefill_max_batch_size", "tensor_parallel_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.paged_attn and self.block_size & (self.block_size - 1):
            # the Triton attention kernels take a block's tokens in power-of-two tiles (tl.arange)
            raise ValueError(
                f"paged_attn (--paged-attn) needs a power-of-two block_size (--block-size), got {self.block_size}"
            )
        if self.cpu_threads is not None and (not isinstance(self.cpu_threads, int) or self.cpu_threads < 1):
            raise ValueError(f"cpu_threads must be an integer >= 1, got {self.cpu_threads!r}")
        if not isinstance(self.flight_recorder_steps, int) or self.flight_recorder_steps < 0:
            raise ValueError(
                f"flight_recorder_steps must be an integer >= 0, got {self.flight_recorder_steps!r}"
            )
        if self.tp_allreduce not in ("nccl", "symm_mem", "fused"):
            raise ValueError(f"tp_allreduce must be 'nccl', 'symm_mem' or 'fused', got {self.tp_allreduce!r}")
        if self.tp_allreduce != "nccl" and not self.device.startswith("cuda"):
            raise ValueError(
                f"tp_allreduce={self.tp_allreduce!r} (--tp-allreduce {self.tp_allreduce}) needs a CUDA device"
            )
        if self.tp_allreduce == "symm_mem" and self.dtype == "float16":
            # torch's symmetric-memory reduction kernels are built for float32 and bfloat16
            raise ValueError(
                "tp_allreduce='symm_mem' (--tp-allreduce symm_mem) needs bfloat16 or float32 (--dtype)"
            )
        if not self.tp_timeout_s > 0:
            raise ValueError(f"tp_timeout_s must be > 0, got {self.tp_timeout_s!r}")
        if self.num_blocks is not None and self.num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {self.num_blocks!r}")
        if self.dtype not in ("float32", "float16", "bfloat16"):
            raise ValueError(f"dtype must be float32, float16 or bfloat16, got {self.dtype!r}")
        if self.cuda_graph and not (self.batched_kv_append and self.batched_rollover):
            # The graph path allocates every slot before the step; the earlier designs append inside it.
            raise ValueError(
                "cuda_graph (--cuda-graph) cannot be combined with the earlier-design switches "
                "batched_kv_append=False or batched_rollover=False"
            )
        if self.prefill_admission_policy not in ("fifo", "shortest-first"):
            raise ValueError(
                f"prefill_admission_policy must be 'fifo' or 'shortest-first', got {self.prefill_admission_policy!r}"
            )

    @classmethod
    def from_options(cls, **options) -> EngineConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(
                f"unknown engine option(s): {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        return cls(**options)
