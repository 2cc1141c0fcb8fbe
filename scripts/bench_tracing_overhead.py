"""What the engine's instrumentation costs: per region (noise-free) and per decode step.

    python scripts/bench_tracing_overhead.py

The end-to-end A/B on a shared 2-core machine swings by +-5% run to run, more than the effect, so the cost is
measured where it is paid: the enter+exit time of one region with tracing off, with NVTX on, and with NVTX and
record_function on (and, regions on, inside an open decode step, where each region also reads the thread's CPU
time), times the number of regions one decode step opens, over the measured step time; and the step log record's
CPU times (json.dumps with and without them).
"""

import contextlib
import json
import time

import torch

from roseinfer import LLM, SamplingParams, tracing


def region_cost_ns(n: int = 200_000, inside_step: bool = False) -> float:
    """One region's enter+exit; `inside_step`: inside an open decode step, where regions read the thread's CPU
    time (tracing._StepCpu) when regions are on."""
    with tracing.region(tracing.DECODE_STEP) if inside_step else contextlib.nullcontext():
        t0 = time.perf_counter_ns()
        for _ in range(n):
            with tracing.region(tracing.SAMPLE):
                pass
        spent = time.perf_counter_ns() - t0
    tracing.take_step_cpu()
    return spent / n


def step_record_cost_ns(n: int = 20_000) -> tuple[float, float]:
    """json.dumps of one decode step's record (batch 16) without and with its CPU times (step log version 3)."""
    record = {"type": "step", "index": 7, "start_ns": 10**15, "end_ns": 10**15 + 7_500_000, "batch_size": 16,
              "rollovers": 0, "cow": 0, "requests": list(range(16)), "launched": True, "bucket": None}  # fmt: skip
    own = {name: 123_456 for name in tracing.REGION_NAMES[:12]}
    costs = []
    for rec in (record, {**record, "cpu_ns": 7_400_000, "cpu_own_ns": own}):
        t0 = time.perf_counter_ns()
        for _ in range(n):
            json.dumps(rec, separators=(",", ":"))
        costs.append((time.perf_counter_ns() - t0) / n)
    return costs[0], costs[1]


def main() -> None:
    costs = {}
    for label, nvtx, rf in (
        ("off", False, False),
        ("nvtx", True, False),
        ("nvtx+record_function", True, True),
    ):
        tracing.configure(nvtx=nvtx, record_function=rf)
        region_cost_ns(10_000)
        costs[label] = min(region_cost_ns() for _ in range(3))
        if tracing.STATE.enabled:  # regions on: inside a decode step they also read the thread's CPU time
            costs[f"{label}, inside a decode step"] = min(region_cost_ns(inside_step=True) for _ in range(3))
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
    plain, with_cpu = step_record_cost_ns()
    print(f"step log record (json.dumps): {plain / 1e3:.1f} µs, with its CPU times {with_cpu / 1e3:.1f} µs "
          f"(+{100 * (with_cpu - plain) / step_ns:.2f}% of a step)")  # fmt: skip


if __name__ == "__main__":
    main()
