"""What the engine's instrumentation costs: per region (noise-free) and per decode step.

    python scripts/bench_tracing_overhead.py

The end-to-end A/B on a shared 2-core machine swings by +-5% run to run, more than the effect, so the cost is
measured where it is paid: the enter+exit time of one region with tracing off, with NVTX on, and with NVTX and
record_function on (and, regions on, inside an open decode step, where each region also reads the wall clock, and
on a CPU engine on one thread the thread's CPU time: tracing._StepTimes), times the number of regions one decode
step opens, over the measured step time; and the step log record's region times (json.dumps with and without
them). A GPU engine's step (CUDA graphs) opens GRAPH_STEP_REGIONS regions: its cost of the host times is the wall-
clock-only row's difference from the row outside a step, times that.
"""

import contextlib
import json
import time

import torch

from roseinfer import LLM, SamplingParams, tracing

# decode_step, build_block_tables, h2d_block_tables, model.forward, reserve_blocks_ahead, sample (the rest are
# inside the replayed graph: roseinfer/decode_paths.py's static path)
GRAPH_STEP_REGIONS = 6


def region_cost_ns(n: int = 200_000, inside_step: bool = False, step_cpu: bool = True) -> float:
    """One region's enter+exit; `inside_step`: inside an open decode step, where regions read the wall clock and,
    with `step_cpu` (a CPU engine on one thread), the thread's CPU time (tracing._StepTimes) when regions are on."""
    tracing.STATE.step_cpu = step_cpu
    with tracing.region(tracing.DECODE_STEP) if inside_step else contextlib.nullcontext():
        t0 = time.perf_counter_ns()
        for _ in range(n):
            with tracing.region(tracing.SAMPLE):
                pass
        spent = time.perf_counter_ns() - t0
    tracing.take_step_times()
    return spent / n


def step_record_cost_ns(n: int = 20_000) -> tuple[float, float, float]:
    """json.dumps of one decode step's record (batch 16) without region times, with a CPU engine's (CPU and host
    times of 12 regions) and with a GPU engine's (host times of GRAPH_STEP_REGIONS regions)."""
    record = {"type": "step", "index": 7, "start_ns": 10**15, "end_ns": 10**15 + 7_500_000, "batch_size": 16,
              "rollovers": 0, "cow": 0, "requests": list(range(16)), "launched": True, "bucket": None}  # fmt: skip
    own = {name: 123_456 for name in tracing.REGION_NAMES[:12]}
    costs = []
    gpu = {name: 123_456 for name in tracing.REGION_NAMES[:GRAPH_STEP_REGIONS]}
    for rec in (
        record,
        {**record, "cpu_ns": 7_400_000, "cpu_own_ns": own, "host_own_ns": own},
        {**record, "host_own_ns": gpu},
    ):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            json.dumps(rec, separators=(",", ":"))
        costs.append((time.perf_counter_ns() - t0) / n)
    return costs[0], costs[1], costs[2]


# each case once a round, interleaved (a shared machine's load moves between rounds); the minimum over rounds
ROUNDS = 7


def region_costs() -> dict[str, float]:
    """Each tracing case's region cost (ns), the minimum over ROUNDS interleaved rounds."""
    cases = [
        ("off", False, False, None),
        ("nvtx", True, False, None),
        ("nvtx+record_function", True, True, None),
    ]
    # regions on (no tool attached here: record_function with no profiler recording): inside a decode step they
    # also read the clocks
    cases += [
        ("nvtx+record_function, inside a decode step, both clocks (CPU engine)", True, True, True),
        ("nvtx+record_function, inside a decode step, wall clock only (GPU engine)", True, True, False),
    ]
    costs: dict[str, list[float]] = {label: [] for label, *_ in cases}
    for _ in range(ROUNDS):
        for label, nvtx, rf, step_cpu in cases:
            tracing.configure(nvtx=nvtx, record_function=rf)
            if step_cpu is None:
                costs[label].append(region_cost_ns(50_000))
            else:
                costs[label].append(region_cost_ns(50_000, inside_step=True, step_cpu=step_cpu))
    return {label: min(v) for label, v in costs.items()}


def main() -> None:
    costs = region_costs()
    tracing.configure(nvtx=False, record_function=False)
    llm = LLM("gpt2-tiny", max_batch_size=16)
    params = SamplingParams(max_new_tokens=128, ignore_eos=True)
    llm.generate([[1] * 45] * 16, SamplingParams(max_new_tokens=8, ignore_eos=True))
    llm.engine.stats["decode_ns"] = 0
    steps0 = llm.engine.decode_steps
    llm.generate([[1] * 45] * 16, params)
    steps = llm.engine.decode_steps - steps0
    step_ns = llm.engine.stats["decode_ns"] / steps
    layers = llm.engine.model_cfg.n_layer
    # scheduler.step, decode_step, build, h2d, forward, sample, argmax, embedding, the first layernorm, lm_head;
    # per layer attention, kv.append, mlp and two layernorms (ln_2, then the next ln_1 or ln_f)
    per_step = 10 + 5 * layers
    print(
        f"torch {torch.__version__}, gpt2-tiny, batch 16: decode step {step_ns / 1e3:.0f} µs, {per_step} regions per step"
    )
    print("| tracing | one region (enter+exit) | per decode step | share of a step |")
    print("|---|---|---|---|")
    for label, c in costs.items():
        print(f"| {label} | {c:.0f} ns | {c * per_step / 1e3:.1f} µs | {100 * c * per_step / step_ns:.2f}% |")
    rf = "nvtx+record_function"
    extra = costs[f"{rf}, inside a decode step, wall clock only (GPU engine)"] - costs[rf]
    print(f"a GPU engine's host times: +{extra:.0f} ns a region, +{extra * GRAPH_STEP_REGIONS / 1e3:.2f} µs a graph "
          f"decode step ({GRAPH_STEP_REGIONS} regions)")  # fmt: skip
    plain, with_cpu, with_host = step_record_cost_ns()
    print(f"step log record (json.dumps): {plain / 1e3:.1f} µs, with a CPU engine's region times "
          f"{with_cpu / 1e3:.1f} µs (+{100 * (with_cpu - plain) / step_ns:.2f}% of a step), with a GPU engine's "
          f"{with_host / 1e3:.1f} µs")  # fmt: skip


if __name__ == "__main__":
    main()
