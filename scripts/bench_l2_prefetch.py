"""Does a bulk L2 prefetch bring a layer's weights in? (issue 27, round 4)

    python scripts/bench_l2_prefetch.py

GPT-2 small's four weight matrices of one layer (14.2 MB, fp16), read by the engine's one-row GEMV each, back to
back: from HBM (L2 flushed by writing 256 MB first), after a `cp.async.bulk.prefetch.L2` kernel
(`roseinfer.kernels.l2_prefetch`) that ran D us before, and from L2 (read once just before). Each case is a
captured graph with and without the reads; the reads' time is the difference of their replay times (median of
60 replays, median of 3 differences), so no host launch is timed.
"""

import statistics

import torch

from roseinfer.kernels.gemv import gemv_triton
from roseinfer.kernels.l2_prefetch import chunk_table, prefetch_chunks


def graph(fn) -> torch.cuda.CUDAGraph:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # compile and warm up
        fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g


def replay_us(g: torch.cuda.CUDAGraph, reps: int = 60) -> float:
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.replay()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) * 1e3)
    return statistics.median(times)


def main() -> None:
    c = 768
    shapes = [(3 * c, c), (c, c), (4 * c, c), (c, 4 * c)]  # c_attn, attn_proj, c_fc, mlp_proj: [N, K]
    ws = [torch.randn(n, k, device="cuda", dtype=torch.float16) * 0.02 for n, k in shapes]
    xs = {k: torch.randn(1, k, device="cuda", dtype=torch.float16) for _, k in shapes}
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    table = chunk_table(ws)
    hz = torch.cuda.get_device_properties(0).clock_rate * 1e3  # kHz -> Hz: torch.cuda._sleep counts SM cycles

    def read():
        for w in ws:
            gemv_triton(xs[w.shape[1]], w)

    print(f"one layer's weights, {sum(w.numel() * 2 for w in ws) / 1e6:.1f} MB: four one-row GEMVs, GPU us")
    for delay in (3, 6, 10, 20):
        sleep = lambda d=delay: torch.cuda._sleep(int(d * 1e-6 * hz))  # noqa: E731
        cases = {
            "from HBM": lambda s=sleep: (flush.fill_(1), s()),
            "prefetched": lambda s=sleep: (flush.fill_(1), prefetch_chunks(*table), s()),
            "from L2": lambda s=sleep: (flush.fill_(1), read(), s()),
        }
        row = {}
        for name, before in cases.items():
            with_reads, without = graph(lambda b=before: (b(), read())), graph(before)
            row[name] = statistics.median(replay_us(with_reads) - replay_us(without) for _ in range(3))
        print(f"prefetch {delay} us before the reads: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()))


if __name__ == "__main__":
    main()
