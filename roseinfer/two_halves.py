"""A bucket's decode step as two halves of its batch on two streams (`GraphKernels.halves_in`).

Decode rows are independent until their logits, so a step can run as two halves of the batch with no data in
common: on two streams, forked from the step's and joined back before it ends (inside a CUDA graph, two branches of
it). Where one stream leaves SMs idle the other half's kernels take them. That is why the engine does it in buckets
of 208 to 256 rows of GPT-2 small: there c_attn's 64-row CUTLASS tiles make two waves on 132 SMs, the second
mostly empty, and two halves of at most 128 rows each make one wave each, beside the other half's kernels (6 to
10% off a step on an H200; docs/BENCHMARKS.md, session 48). And at 512 rows, where each half's CUTLASS GEMM runs
on its shallow pipeline, whose blocks leave room on an SM for the other half's attention blocks: the tensor-core
bound GEMMs beside the memory-bound attention (5% off; session 54). Elsewhere a half costs most of what the whole
batch does (each kernel's weights and fixed chain are paid per launch), and the halves side by side lose
(sessions 15, 43, 48 and 54). Ordering the two halves' attention kernels to take turns, so that each runs beside
the other half's GEMMs (NanoFlow's nano-batching), was slower than leaving the streams unordered (session 48).

Each half's kernels are those of a bucket of its rows (`roseinfer.cuda_graphs` enters the kernel choices once for
both). The halves' launches interleave a block at a time (`GPT2.steps`), so that a profiler's capture-time regions
stay nested on the one capturing thread as they are in one pass. Without CUDA the halves run one after the other
(what CPU tests check: the tokens of one pass).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

# part(lo, hi, logits_out): the step of rows [lo, hi) one block at a time (None after each), then (logits, tokens)
Part = Callable[[int, int, torch.Tensor], Iterator]


class TwoHalves:
    def __init__(self, device: torch.device) -> None:
        # the step's own two streams, made once: a captured graph's branches are recorded on them
        self.streams = (
            (torch.cuda.Stream(device), torch.cuda.Stream(device)) if device.type == "cuda" else None
        )

    def run(self, bucket: int, part: Part, logits_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [bucket, V] (a view of `logits_out` [bucket, V_PAD], whose rows each half's lm_head writes) and
        greedy tokens [bucket] of the step of rows [0, bucket), run as two halves."""
        half = bucket // 2
        main = torch.cuda.current_stream(self.streams[0].device) if self.streams is not None else None
        lanes = self.streams or (None, None)
        parts = []
        for i, stream in enumerate(lanes):
            if stream is not None:
                stream.wait_stream(main)  # the fork: after whatever the step's stream staged
            parts.append(part(i * half, (i + 1) * half, logits_out[i * half : (i + 1) * half]))
        results: list = [None, None]
        while results[0] is None or results[1] is None:  # a block of each half in turn
            for i, (stream, steps) in enumerate(zip(lanes, parts)):
                if results[i] is None:
                    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                        results[i] = next(steps)
        for stream in self.streams or ():
            main.wait_stream(stream)  # the join: the step ends when both halves have
        (logits, greedy_0), (_, greedy_1) = results
        return logits_out[:, : logits.shape[1]], torch.cat([greedy_0, greedy_1])  # [bucket, V], [bucket]
