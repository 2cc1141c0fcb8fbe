"""Would a decode step run faster as two half batches on two streams (two-batch overlap)?

    python scripts/bench_two_halves.py --model gpt2 --batch 64 --past 65,128,512

Builds two engines of `--batch` rows (fp16, --paged-attn, CUDA graphs) that share one copy of the weights, every
row at the same past, and times with events (median of --reps replays, in two rounds):
- big: one engine's graph of the whole batch;
- half A, half B: each engine's graph of half the batch;
- serial: both halves one after the other on one stream;
- overlap: both halves at once, each on a stream of its own (what a step split in two would at best cost).
At batch 64 and below every kernel of a step is a latency chain with the SMs half idle (docs/BENCHMARKS.md,
issue 27), so two independent chains might fill them. `--kernels` picks the graphs' kernel choices: `default`
(the engine's) or `plain` (no dependent launches in the halves' bucket, no early release by the attention).
"""

import argparse
import json

import torch
from bench_graph_step import freeze  # scripts/ is on the path of a script run from it

from roseinfer import LLM, tracing
from roseinfer.bench.timing import LEAD_CYCLES, time_us
from roseinfer.cuda_graphs import GraphKernels

KERNELS = {
    "default": GraphKernels(),
    "plain": GraphKernels(skinny_gemm_pdl=False, pdl_attention_release=False),
}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="gpt2")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--past", default="65,128,512")
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--kernels", choices=sorted(KERNELS), default="default")
    a = p.parse_args()
    tracing.configure(nvtx=False, record_function=False)
    half = a.batch // 2
    engines = [
        LLM(a.model, device="cuda", dtype="float16", max_batch_size=a.batch, paged_attn=True).engine
        for _ in range(2)
    ]
    for mine, shared in zip(engines[1].runner.model.parameters(), engines[0].runner.model.parameters()):
        mine.data = shared.data  # one copy of the weights, as one engine running two halves would read
    for engine in engines:
        engine.use_static_decode(capture=True, kernels=KERNELS[a.kernels])
    first, second = (e.graphs for e in engines)
    streams = torch.cuda.Stream(), torch.cuda.Stream()

    def overlap() -> None:
        here = torch.cuda.current_stream()
        for stream, graphs in zip(streams, (first, second)):
            stream.wait_stream(here)
            with torch.cuda.stream(stream):
                graphs.replay(half)
        for stream in streams:
            here.wait_stream(stream)

    def serial() -> None:
        first.replay(half)
        second.replay(half)

    print(
        f"{a.model} fp16 --paged-attn, batch {a.batch} against two halves of {half}, kernels {a.kernels}: µs"
    )
    for past in (int(x) for x in a.past.split(",")):
        for engine in engines:
            freeze(engine, a.batch, past)
        for _ in range(2):
            row = {
                "big": time_us(lambda: first.replay(a.batch), a.reps, LEAD_CYCLES),
                "half A": time_us(lambda: first.replay(half), a.reps, LEAD_CYCLES),
                "half B": time_us(lambda: second.replay(half), a.reps, LEAD_CYCLES),
                "serial": time_us(serial, a.reps, LEAD_CYCLES),
                "overlap": time_us(overlap, a.reps, LEAD_CYCLES),
            }
            print(f"past {past}: " + json.dumps({k: round(v, 1) for k, v in row.items()}), flush=True)


if __name__ == "__main__":
    main()
