"""GPU timing for the kernel benchmarks (scripts/bench_*.py): CUDA events, medians, and CUDA-graph replays."""

from __future__ import annotations

import statistics

# GPU clock cycles a stream spins before a timed span (~200 us on an H100 at 1.98 GHz): longer than the CPU takes
# to launch a graph (7 to 20 us on the H100's host; 60 to 100 once a profiler ran), so the span times the GPU only.
LEAD_CYCLES = 400_000


def time_us(fn, reps: int, lead_cycles: int = 0) -> float:
    """Median µs of one call between two CUDA events (an eager call: Python launch overhead included, unless
    `lead_cycles` of spinning before the start event let the CPU queue the call first)."""
    import torch

    for _ in range(10):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if lead_cycles:
            torch.cuda._sleep(lead_cycles)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def captured(step, warmups: int = 1):
    """(graph, outputs): `step` run `warmups` times on a side stream (Triton compiles, cuBLAS picks its kernels, as
    before the engine captures its decode step), then captured in a CUDA graph; `outputs` is what the captured run
    returned, tensors that every replay rewrites."""
    import torch

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warmups):
            step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = step()
    return graph, outputs


def graph_us(fn, reps: int, calls: int = 20) -> float:
    """µs of GPU time per call: `calls` calls captured in a CUDA graph, the replay timed, divided by `calls`.
    What a kernel costs inside a captured decode step; timing single eager calls of a Triton kernel measures its
    Python launch (~40 µs) instead."""
    import torch

    fn()
    torch.cuda.synchronize()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    return time_us(graph.replay, reps) / calls


def graph_copies_us(fn, copies: int, reps: int = 20) -> float:
    """Median µs of one call, from a graph of `copies` back-to-back calls, fn(i) the i-th (each on its own copy of
    the weights or inputs, so that together they can exceed the L2 cache)."""
    import torch

    graph, _ = captured(lambda: [fn(i) for i in range(copies)])
    graph.replay()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / copies)
    return statistics.median(times)


def replays_us(graph, replays: int) -> float:
    """Mean µs a replay of `graph` over `replays` replays back to back between two CUDA events, after one replay
    waited for: the GPU's steady state, no gap between replays (where `time_us` takes the median of single calls)."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    graph.replay()
    torch.cuda.synchronize()
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1000 / replays
