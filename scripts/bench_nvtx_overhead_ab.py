"""NVTX (or record_function) on vs off in one process, alternating step by step: what the engine's regions cost.

    python scripts/bench_nvtx_overhead_ab.py --device cuda --model gpt2 --cuda-graph --paged-attn

Separate processes (ROSEINFER_NVTX=0/1) differed by up to 20% between two launches of the same setting on the
GPU machine, and whole generate() calls alternated on/off still drifted by several % (the GPU's clocks, the
host's other tenants), more than the effect. So one engine serves both settings and the setting flips every
decode step: neighbouring steps see the same context length and the same machine, and the drift cancels.
Each generate() starts with the other setting. Reports the mean decode step time of each setting and the ratio.
Both switches are measured as a user without a profiler gets them: record_function spans are made only while a
torch profiler records, and NVTX ranges only when a tool is attached (NVTX_INJECTION64_PATH, which nsys and ncu
set): run it under `nsys profile` to include what NVTX costs in the program itself there.
"""

import argparse

import numpy as np

from roseinfer import LLM, SamplingParams, tracing


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--device", default="cpu")
    p.add_argument("--model", default="gpt2-tiny")
    p.add_argument("--dtype", default=None)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--new-tokens", type=int, default=256)
    p.add_argument(
        "--pairs", type=int, default=8, help="generate() calls, each alternating on/off step by step"
    )
    p.add_argument("--paged-attn", action="store_true")
    p.add_argument("--cuda-graph", action="store_true")
    p.add_argument(
        "--switch",
        choices=["nvtx", "record_function"],
        default="nvtx",
        help="what 'on' turns on: NVTX ranges, or record_function spans (torch.profiler's, profiler not running)",
    )
    a = p.parse_args()
    dtype = a.dtype or ("float16" if a.device == "cuda" else "float32")
    llm = LLM(
        a.model,
        device=a.device,
        dtype=dtype,
        max_batch_size=a.batch,
        prefill_max_batch_size=a.batch,
        paged_attn=a.paged_attn,
        cuda_graph=a.cuda_graph,
    )
    engine = llm.engine
    prompts = [[1]] * a.batch
    params = SamplingParams(max_new_tokens=a.new_tokens, ignore_eos=True)

    def generate(first_on: bool) -> dict[bool, list[int]]:
        """One generate() of the batch, the setting flipped before every step; decode ns of each step by setting."""
        for ids in prompts:
            engine.add_request(ids, params)
        out: dict[bool, list[int]] = {False: [], True: []}
        on = first_on
        while engine.has_unfinished():
            tracing.configure(
                nvtx=on and a.switch == "nvtx", record_function=on and a.switch == "record_function"
            )
            before, steps = engine.stats["decode_ns"], engine.stats["decode_steps"]
            engine.step()
            if engine.stats["decode_steps"] > steps:  # a decode step (not a prefill-only step)
                out[on].append(engine.stats["decode_ns"] - before)
            on = not on
        return out

    generate(False)  # warm-up (graphs captured, caches filled)
    times: dict[bool, list[int]] = {False: [], True: []}
    ratios = []
    for i in range(a.pairs):
        run = generate(first_on=i % 2 == 1)
        for k in (False, True):
            times[k] += run[k]
        ratios.append(np.mean(run[True]) / np.mean(run[False]))
    off, on = float(np.mean(times[False])) / 1e3, float(np.mean(times[True])) / 1e3
    off50, on50 = float(np.median(times[False])) / 1e3, float(np.median(times[True])) / 1e3
    print(
        f"{a.model} {a.device} {dtype} batch {a.batch}, {a.new_tokens} tokens, graphs={a.cuda_graph}, "
        f"{a.pairs} generate calls"
    )
    print(
        f"decode step mean over {len(times[False])} + {len(times[True])} alternating steps: {a.switch} off "
        f"{off:.1f} us, on {on:.1f} us: {100 * (on / off - 1):+.2f}% (p50 {off50:.1f} -> {on50:.1f} us: "
        f"{100 * (on50 / off50 - 1):+.2f}%)"
    )
    print(
        f"per-generate on/off: median {np.median(ratios):.4f}, min {min(ratios):.4f}, max {max(ratios):.4f}"
    )


if __name__ == "__main__":
    main()
