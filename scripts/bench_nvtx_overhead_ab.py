"""NVTX on vs off in one process, runs interleaved: what the engine's regions cost end to end.

    python scripts/bench_nvtx_overhead_ab.py --device cuda --model gpt2 --cuda-graph --paged-attn

Separate processes (ROSEINFER_NVTX=0/1) differed by up to 20% between two launches of the same setting on the
GPU machine, more than the effect, so one engine (one set of captured graphs) serves both settings and the
pairs alternate which goes first. Reports the median decode step time of each setting and the ratio.
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
    p.add_argument("--pairs", type=int, default=8)
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

    def step_us(nvtx: bool) -> float:
        tracing.configure(
            nvtx=nvtx and a.switch == "nvtx", record_function=nvtx and a.switch == "record_function"
        )
        engine.stats.update(decode_ns=0, decode_steps=0)
        llm.generate(prompts, params)
        return engine.stats["decode_ns"] / engine.stats["decode_steps"] / 1e3

    step_us(False)  # warm-up
    times: dict[bool, list[float]] = {False: [], True: []}
    for i in range(a.pairs):
        for nvtx in (False, True) if i % 2 == 0 else (True, False):
            times[nvtx].append(step_us(nvtx))
    off, on = float(np.median(times[False])), float(np.median(times[True]))
    ratios = [b / x for x, b in zip(times[False], times[True])]
    print(
        f"{a.model} {a.device} {dtype} batch {a.batch}, {a.new_tokens} tokens, graphs={a.cuda_graph}, {a.pairs} pairs"
    )
    print(f"decode step p50: {a.switch} off {off:.1f} us, on {on:.1f} us: {100 * (on / off - 1):+.2f}%")
    print(f"per-pair on/off: median {np.median(ratios):.4f}, min {min(ratios):.4f}, max {max(ratios):.4f}")


if __name__ == "__main__":
    main()
