"""Each captured step's kernel stamps to the stamps file, without waiting for the GPU (issue 50's regions).

The one-row fused kernels (`fused_attn`, `fused_mlp`) stamp their phases into their scratch's stamp buffer
(`stamp_rows`, [n_layer, NSTAMP, BLOCKS]), one launch per layer a step. After a replay `StampRecorder.after_step`
queues a copy of every such buffer into a slot of a pinned host ring and an event behind it, and writes the steps
whose copies have landed, in order: one line per launch (`stamps.StampLog`), each kernel's lines in its launch order, which is what
roseprof matches them by (roseprof/workload/kernel_stamps.py). `flush` writes the rest, waiting for them.

This runs after every profiled step on the engine's thread, so what it costs there is in every profile of a
batch-1 engine (a step is ~0.16 ms of GPU on an H200; with the recorder of session 29 a batch-1 step with stamps
took 0.27-0.59 ms where one without takes 0.16, docs/BENCHMARKS.md session 30). The ring is made once (no pinned
allocation a step), the kernels write their stamps stamp-major so that the reduction runs in numpy over the
contiguous blocks with no copy (`launch_bounds`), a kernel's lines of a step come from one format call
(`StampLog.lines`) and the step's lines reach the file in one append (`StampLog.write`). Each step's lines are
written as soon as its copies land, so the cost is the same every step: writing several steps at once would put a
burst of it into every few steps, which a profile of the engine would show as ITL spikes of its own making.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from roseinfer.cuda_ext.stamps import StampLog

RING = 16  # steps whose stamps can be in flight (one pinned slot each, a kernel's [L, NSTAMP, BLOCKS])


def launch_bounds(by_stamp: np.ndarray) -> np.ndarray:
    """Stamps stamp-major [..., NSTAMP, BLOCKS] -> each launch's NSTAMP phase bounds [..., NSTAMP]
    (`stamps.phase_bounds`: the earliest block's start, then each boundary where the last block passed it).
    Reduced over the contiguous blocks: numpy's max over a strided blocks axis took ~4x as long (46 against 12 us
    for [12, 96, 6]), and a contiguous copy first most of those 12."""
    out = by_stamp.max(axis=-1)  # [..., NSTAMP]
    out[..., 0] = by_stamp[..., 0, :].min(axis=-1)
    return out


@dataclass(frozen=True)
class StampedKernel:
    """A stamping kernel's scratch (`.stamp_rows`, `.launched`), its CUDA function's name, its phases' region names
    (NSTAMP - 1) and how a step's copy of stamp_rows reduces to each launch's bounds [launches, NSTAMP]: by default
    (`launch_bounds`) stamp_rows is [L, NSTAMP, BLOCKS], a launch per layer of one grid each; a kernel whose
    launches differ in size hands its own (`roseinfer.fused_allreduce.ReaderStamps.launch_bounds`)."""

    scratch: object
    kernel: str
    regions: tuple[str, ...]
    bounds: Callable[[np.ndarray], np.ndarray] = launch_bounds


class _Landed:
    """The event of a copy that ran synchronously (stamps on the CPU: the tests' engine without a GPU)."""

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        pass


class StampRecorder:
    def __init__(self, kernels: list[StampedKernel], log: StampLog, ring: int = RING) -> None:
        self.kernels, self.log = kernels, log
        self.ring_size = ring
        # each kernel's [RING, L, NSTAMP, BLOCKS], pinned, made at its first step
        self.rings: list[torch.Tensor | None] = [None] * len(kernels)
        # (slot, which kernels launched, the event after the copies), oldest first; slots taken in turn
        self.pending: deque[tuple[int, tuple[bool, ...], object]] = deque()
        self.next_slot = 0

    def after_step(self) -> None:
        # A kernel whose step took the Triton path (a width not built, no nvcc) launched nothing: its zero stamps
        # must not reach the file as launches.
        launched = tuple(bool(k.scratch.launched) for k in self.kernels)
        if not any(launched):
            return
        if len(self.pending) == self.ring_size:  # every slot in flight: the oldest step waits for its copies
            self._write_oldest()
        slot, self.next_slot = self.next_slot, (self.next_slot + 1) % self.ring_size
        on_gpu = False
        for i, (k, ran) in enumerate(zip(self.kernels, launched)):
            if ran:
                self._ring(i)[slot].copy_(k.scratch.stamp_rows, non_blocking=True)  # [L, NSTAMP, BLOCKS]
                on_gpu |= k.scratch.stamp_rows.is_cuda
        done = _Landed()
        if on_gpu:
            done = torch.cuda.Event()
            done.record()
        self.pending.append((slot, launched, done))
        while self.pending and self.pending[0][2].query():
            self._write_oldest()

    def flush(self) -> None:
        while self.pending:
            self._write_oldest()

    def close(self) -> None:
        """Write what is left and close the stamps file (at the process's exit)."""
        try:
            self.flush()
        finally:  # a flush that fails (a CUDA error at exit) still leaves the lines written so far in the file
            self.log.close()

    def _ring(self, i: int) -> torch.Tensor:
        if self.rings[i] is None:
            stamps = self.kernels[i].scratch.stamp_rows
            self.rings[i] = torch.empty(
                (self.ring_size, *stamps.shape), dtype=torch.int64, pin_memory=stamps.is_cuda
            )
        return self.rings[i]

    def _write_oldest(self) -> None:
        """The oldest step's lines, each kernel's launches in layer order (once its copies have landed)."""
        slot, launched, done = self.pending.popleft()
        done.synchronize()  # landed already, except where the ring was full or at a flush
        lines = [
            self.log.lines(k.kernel, k.regions, k.bounds(self.rings[i].numpy()[slot]))
            for i, k in enumerate(self.kernels)
            if launched[i]
        ]
        self.log.write(b"".join(lines))  # the step's lines in one append
