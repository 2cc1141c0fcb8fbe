"""Where the host's time goes in a decode step, without a profiler attached: each part of `Engine.step` timed
with perf_counter (NVTX off; `Engine.time_parts`), and a CUDA graph replay alone (launch cost on the CPU, run
time on the GPU). With the overlapped decode (the default with CUDA graphs) `runner.read_tokens` is where the
host waits for the GPU.

    python scripts/bench_decode_host.py --device cuda --model gpt2 --batch 64 --new-tokens 256

With CUDA graphs the GPU idles while the host prepares the next step (nsys showed ~0.56 ms idle per 1.5 ms step
on workload (a)); this says which part of that is which. The slot reservation (`runner.reserve_decode_slots`,
where rollover blocks are allocated) is also given apart for the steps in which the batch starts blocks, the steps
whose host tables changed otherwise (blocks reserved ahead) and the rest. On CPU the static path runs without capture (equal one-token prompts: the batch in lock-step).

`--no-device-work` (CPU) replaces the step's forward by its outputs, computed once a bucket, so that what is timed
is the host's Python alone; a first run then times `Engine.step` with no other part timed (the parts' timers add
about 0.3 us a call here). The GPU machine's host ran the same parts 3.5-4x slower (docs/BENCHMARKS.md, session 65):

    python scripts/bench_decode_host.py --no-device-work --model gpt2-tiny --batch 1

On CUDA a second run puts a CUDA event pair around each replay (`DecodeGraphs.run`): the replay's own GPU time and
the GPU time from one replay's end to the next one's start (what the GPU spends outside the graph: the host's
copies and kernels between steps, and idle waiting for the host), step by step, the first decode step apart; and
Python's garbage collections in that run (the heap of the start-up frozen first, as the benchmarks and the server
freeze theirs: `roseinfer.frozen_heap`).
"""

import argparse
import gc
import time

import numpy as np
import torch

from roseinfer import LLM, SamplingParams, tracing
from roseinfer.frozen_heap import freeze_startup_heap


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--model", default="gpt2-tiny")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument("--no-device-work", action="store_true", help="CPU: the forward replaced by its outputs")
    a = p.parse_args()
    cuda = a.device == "cuda"
    if a.no_device_work and cuda:
        p.error("--no-device-work is for the CPU (a CUDA step's device work is a graph replay)")
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
    freeze_startup_heap()  # as the benchmarks and the server's engine core do (roseinfer.frozen_heap)
    llm.generate(prompts, SamplingParams(max_new_tokens=16, ignore_eos=True))  # warm-up
    if a.no_device_work:
        host_only(llm, engine, prompts, a.new_tokens)
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
        replay_events(llm, engine, prompts, a.new_tokens)
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


def host_only(llm, engine, prompts, new_tokens: int, runs: int = 5) -> None:
    """The step's forward replaced by its outputs (one real forward a bucket), then `runs` runs with `Engine.step`
    alone timed: prints each run's p50 of a decode step's host time."""
    graphs = engine.graphs
    forward, outputs = graphs.forward, {}

    def outputs_of(bucket):
        if bucket not in outputs:
            outputs[bucket] = tuple(t.clone() for t in forward(bucket))
        return outputs[bucket]

    graphs.forward = outputs_of
    p50 = []
    for _ in range(runs):
        step: dict[str, list[int]] = {}
        tracing.time_calls(engine, {"step": "engine.step"}, step)
        llm.generate(prompts, SamplingParams(max_new_tokens=new_tokens, ignore_eos=True))
        del engine.step  # the instance attribute goes; the method is back
        decode = step["engine.step"][2:]  # the prefill's step and the first decode's apart
        p50.append(np.median(decode) / 1e3)
    print(
        f"host us a step, engine.step alone timed, p50 of each of {runs} runs: "
        + " ".join(f"{v:.1f}" for v in p50)
    )


def replay_events(llm, engine, prompts, new_tokens: int) -> None:
    """One more run with a CUDA event pair around each replay; prints the replays' GPU time and the GPU time between
    one replay's end and the next one's start, the first decode step's apart from the rest."""
    graphs = engine.graphs
    run = graphs.run
    pairs: list[tuple[torch.cuda.Event, torch.cuda.Event, int]] = []

    def timed_run(batch):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        out = run(batch)
        end.record()
        pairs.append((start, end, time.perf_counter_ns()))
        return out

    # (generation, host start ns, host end ns) of each collection
    collections: list[tuple[int, int, int]] = []
    started: list[int] = []

    def on_gc(phase: str, info: dict) -> None:
        if phase == "start":
            started.append(time.perf_counter_ns())
        else:
            collections.append((info["generation"], started.pop(), time.perf_counter_ns()))

    graphs.run = timed_run
    gc.callbacks.append(on_gc)
    try:
        t0 = time.perf_counter_ns()
        llm.generate(prompts, SamplingParams(max_new_tokens=new_tokens, ignore_eos=True))
        wall = time.perf_counter_ns() - t0
    finally:
        gc.callbacks.remove(on_gc)
        del graphs.run  # the instance attribute goes; the method is back
    torch.cuda.synchronize()
    replay = np.array([s.elapsed_time(e) * 1e3 for s, e, _ in pairs])  # us
    between = np.array([pairs[i][1].elapsed_time(pairs[i + 1][0]) * 1e3 for i in range(len(pairs) - 1)])
    period = np.diff([host for _, _, host in pairs]) / 1e3
    print(f"\nreplays with CUDA events ({len(pairs)} decode steps, wall {wall / 1e6:.1f} ms for the run):")
    print("| us | first step | p50 | mean | p99 | max |")
    print("|---|---|---|---|---|---|")
    rows = (
        ("replay, GPU", replay[0], replay[1:]),
        ("end of a replay to the next one's start, GPU", between[0], between[1:]),
        ("host period between runs", period[0], period[1:]),
    )
    for name, first, rest in rows:
        print(
            f"| {name} | {first:.1f} | {np.median(rest):.1f} | {rest.mean():.1f} | "
            f"{np.percentile(rest, 99):.1f} | {rest.max():.1f} |"
        )
    print(
        f"a step's mean GPU time outside its replay: {between.mean():.1f} us "
        f"({between.sum() / 1e3:.2f} ms over the run, the first gap {between[0]:.1f}); the host from the run's "
        f"start to the first replay's launch (the prefill, the first step's setup): {(pairs[0][2] - t0) / 1e3:.1f} us"
    )
    gc_report(collections, pairs, between)


def gc_report(collections, pairs, between) -> None:
    """Python's garbage collections during the run: how many of each generation and how long, and the GPU's time
    outside the replays in the gaps whose host period (from one replay's launch to the next's) held one."""
    print(f"\ngarbage collections during the run: {len(collections)}")
    for gen in range(3):
        took = np.array([end - start for g, start, end in collections if g == gen]) / 1e3  # us
        if len(took):
            print(f"  generation {gen}: {len(took)}, p50 {np.median(took):.1f} us, max {took.max():.1f} us")
    launches = np.array([host for _, _, host in pairs])  # host ns just after each launch
    # gap i (replay i's end to replay i + 1's start) follows the host period from launch i to launch i + 1
    held = np.zeros(len(between), dtype=bool)
    for _, start, _ in collections:
        i = int(np.searchsorted(launches, start)) - 1
        if 0 <= i < len(held):
            held[i] = True
    print(
        f"  gaps after a host period with a collection: {int(held.sum())} of {len(held)}, "
        f"{between[held].sum() / 1e3:.2f} of the {between.sum() / 1e3:.2f} ms the GPU spent outside the replays"
    )


if __name__ == "__main__":
    main()
