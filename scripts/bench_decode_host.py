"""Where the host's time goes in a decode step, without a profiler attached: each part of `Engine.step` timed
with perf_counter (NVTX off; `Engine.time_parts`), and a CUDA graph replay alone (launch cost on the CPU, run
time on the GPU). With the overlapped decode (the default with CUDA graphs) `runner.read_tokens` is where the
host waits for the GPU.

    python scripts/bench_decode_host.py --device cuda --model gpt2 --batch 64 --new-tokens 256

With CUDA graphs the GPU idles while the host prepares the next step (nsys showed ~0.56 ms idle per 1.5 ms step
on workload (a)); this says which part of that is which. The slot reservation (`runner.reserve_decode_slots`,
where rollover blocks are allocated) is also given apart for the steps in which the batch starts blocks, the steps
whose host tables changed otherwise (blocks reserved ahead) and the rest. On CPU the static path runs without capture (equal one-token prompts: the batch in lock-step).
"""

import argparse
import time

import numpy as np
import torch

from roseinfer import LLM, SamplingParams, tracing


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--model", default="gpt2-tiny")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=256)
    a = p.parse_args()
    cuda = a.device == "cuda"
    tracing.configure(nvtx=False, record_function=False)
    llm = LLM(
        a.model,
        device=a.device,
        dtype="float16" if cuda else "float32",
        max_batch_size=a.batch,
        prefill_max_batch_size=a.batch,
        paged_attn=cuda,
        cuda_graph=cuda,
    )
    engine = llm.engine
    if engine.graphs is None:
        engine.use_static_decode(capture=False)
    prompts = [[1]] * a.batch
    llm.generate(prompts, SamplingParams(max_new_tokens=16, ignore_eos=True))  # warm-up
    times: dict[str, list[int]] = {}
    engine.time_parts(times)
    reserve_by_kind: dict[str, list[int]] = {"rollover": [], "tables changed": [], "other": []}
    reserve = engine.runner._reserve_decode_slots

    def timed_reserve(seqs, rows):
        t0 = time.perf_counter_ns()
        out = reserve(seqs, rows)
        kind = "rollover" if out[0] else "tables changed" if out[2] else "other"
        reserve_by_kind[kind].append(time.perf_counter_ns() - t0)
        return out

    engine.runner._reserve_decode_slots = timed_reserve
    llm.generate(prompts, SamplingParams(max_new_tokens=a.new_tokens, ignore_eos=True))
    steps = len(times["graphs.run"])
    print(f"{a.model} {a.device} batch {a.batch}: {steps} decode steps, median per step (us)")
    print("| part of Engine.step | host us (p50) |")
    print("|---|---|")
    for name, values in times.items():
        if len(values) >= steps:
            print(f"| {name} | {np.median(values[-steps:]) / 1e3:.1f} |")
    print("\nreserve_decode_slots by step, rollover blocks allocated ahead:")
    print("| steps | count | host us p50 | p99 | max |")
    print("|---|---|---|---|---|")
    for kind, values in reserve_by_kind.items():
        if values:
            v = np.asarray(values) / 1e3
            print(f"| {kind} | {len(v)} | {np.median(v):.1f} | {np.percentile(v, 99):.1f} | {v.max():.1f} |")
    if cuda:
        bucket = engine.graphs.bucket_for(a.batch)
        engine.runner.freeze_static_inputs(bucket)  # replays below must not advance the past lengths
        launch, gpu = [], []
        for _ in range(200):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            t0 = time.perf_counter_ns()
            engine.graphs.replay(bucket)
            launch.append(time.perf_counter_ns() - t0)
            end.record()
            end.synchronize()
            gpu.append(start.elapsed_time(end) * 1e3)
        print(
            f"graph replay of bucket {bucket}: launch {np.median(launch) / 1e3:.1f} us on the host, "
            f"{np.median(gpu):.1f} us on the GPU (p50 of 200)"
        )


if __name__ == "__main__":
    main()
