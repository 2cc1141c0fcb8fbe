"""GPU time of one captured decode step, with the fast path's kernel changes added one at a time.

    python scripts/bench_graph_step.py --batch 64 --past 128,256,512

Builds GPT-2 small (fp16, --paged-attn) with every row of the batch at the same past length and times a replay
of the batch's CUDA graph with events (median of --reps replays; the inputs are not advanced between replays).
Variants, each adding one change to the one before:
  1. as at the end of session 2: torch KV append below 128 rows, torch residual add + LayerNorm, GEMM then a
     GELU kernel;
  2. + the Triton KV append inside the graph at every batch size;
  3. + residual add and LayerNorm as one Triton kernel;
  4. + the GELU in the c_fc GEMM's epilogue (cuBLASLt);
  5. + the KV append done by the paged-attention kernel (no append kernel): the engine as it is now.
The earlier variants are rebuilt here by swapping the engine's choices back (a measurement device, not options
of the engine).
"""

import argparse
import statistics

import torch
import torch.nn.functional as F

import roseinfer.cuda_graphs
import roseinfer.model
from roseinfer import LLM, tracing
from roseinfer.kv_context import StaticDecodeKV


def plain_linear_gelu(x, lin):
    return F.gelu(lin(x), approximate="tanh")


def replay_us(engine, batch: int, past: int, reps: int) -> float:
    graphs = engine.graphs
    bucket = graphs.bucket_for(batch)
    tables, m = engine.tables, engine.max_blocks_per_seq
    n_layer = engine.model_cfg.n_layer
    # Row b, layer l: blocks b*M .. b*M + M-1 (distinct, inside the pool).
    ids = torch.arange(bucket * m).view(bucket, 1, m).expand(bucket, n_layer, m)
    tables.host[:bucket] = ids
    tables.to_device(bucket)
    engine.inputs_host[0, :bucket] = 1
    engine.inputs_host[1, :bucket] = past
    engine.inputs_host[2, :bucket] = 0  # live = 0: the replay does not advance the past lengths
    engine.inputs[:, :bucket].copy_(engine.inputs_host[:, :bucket])
    graph = graphs.graphs[bucket]
    for _ in range(10):
        graph.replay()
    engine.inputs[0, :bucket] = 1  # the replays wrote their greedy tokens there
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


class SeparateAppend(StaticDecodeKV):
    """The static decode context with the KV append as its own kernel again (variants 1 to 4)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.append_in_attention = False


def build(batch: int, variant: int):
    saved = (
        roseinfer.model.linear_gelu,
        roseinfer.cuda_graphs.triton_available,
        roseinfer.cuda_graphs.StaticDecodeKV,
    )
    try:
        if variant < 5:
            roseinfer.cuda_graphs.StaticDecodeKV = SeparateAppend
        if variant < 4:
            roseinfer.model.linear_gelu = plain_linear_gelu
        if variant < 3:
            roseinfer.cuda_graphs.triton_available = lambda: False  # DecodeGraphs.fused off
        llm = LLM("gpt2", device="cuda", dtype="float16", max_batch_size=batch, paged_attn=True)
        engine = llm.engine
        if variant < 2:
            engine.mgr.triton_min_batch_graph = 128
        engine.use_static_decode(capture=True)
        return engine
    finally:
        (
            roseinfer.model.linear_gelu,
            roseinfer.cuda_graphs.triton_available,
            roseinfer.cuda_graphs.StaticDecodeKV,
        ) = saved


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--past", default="128,256,512")
    p.add_argument("--reps", type=int, default=200)
    a = p.parse_args()
    tracing.configure(nvtx=False, record_function=False)
    pasts = [int(x) for x in a.past.split(",")]
    names = {
        1: "session 2 (torch append < 128 rows, torch add + LayerNorm, GELU kernel)",
        2: "+ Triton KV append in the graph",
        3: "+ fused residual add + LayerNorm",
        4: "+ GELU epilogue",
        5: "+ KV append inside the attention kernel (engine now)",
    }
    print(f"GPT-2 small fp16, --paged-attn, batch {a.batch}: GPU us per graph replay (median of {a.reps})")
    print("| variant | " + " | ".join(f"past {x}" for x in pasts) + " |")
    print("|---|" + "---|" * len(pasts))
    for variant in (1, 2, 3, 4, 5):
        engine = build(a.batch, variant)
        row = [replay_us(engine, a.batch, past, a.reps) for past in pasts]
        print(f"| {names[variant]} | " + " | ".join(f"{x:.1f}" for x in row) + " |")
        del engine
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
