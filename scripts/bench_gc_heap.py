"""What a full garbage collection costs in a process that holds an engine, and with the start-up's heap frozen
(`roseinfer.frozen_heap.freeze_startup_heap`, what the server's engine core, the tensor-parallel workers and the
benchmarks do once their engine is built): the container objects the collector tracks, and the median of five
`gc.collect()` before and after the freeze.

    python scripts/bench_gc_heap.py --model gpt2 [--device cuda]
"""

import argparse
import gc
import time

from roseinfer import LLM, tracing
from roseinfer.frozen_heap import freeze_startup_heap


def full_collection_ms(rounds: int = 5) -> float:
    took = []
    for _ in range(rounds):
        t0 = time.perf_counter_ns()
        gc.collect()
        took.append((time.perf_counter_ns() - t0) / 1e6)
    return sorted(took)[rounds // 2]


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="gpt2")
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    tracing.configure(nvtx=False, record_function=False)
    cuda = a.device == "cuda"
    llm = LLM(
        a.model, device=a.device, dtype="float16" if cuda else "float32", paged_attn=cuda, cuda_graph=cuda
    )
    tracked = len(gc.get_objects())
    before = full_collection_ms()
    freeze_startup_heap()
    after = full_collection_ms()
    print(
        f"{a.model} on {a.device}: {tracked:,} tracked objects; a full collection {before:.1f} ms (median of 5), "
        f"{after:.2f} ms with the start-up's {gc.get_freeze_count():,} frozen"
    )
    del llm


if __name__ == "__main__":
    main()
