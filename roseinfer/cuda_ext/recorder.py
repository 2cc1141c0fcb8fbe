"""Each captured step's kernel stamps to the stamps file, without waiting for the GPU (issue 50's regions).

The one-row fused kernels (`fused_attn`, `fused_mlp`) stamp their phases into their scratch's stamp buffer
[n_layer, BLOCKS, NSTAMP], one launch per layer a step. After a replay `StampRecorder.after_step` queues a copy of
every such buffer into pinned host memory and an event behind it, and writes the steps whose copies have landed,
in order: one line per launch (`stamps.StampLog`), each kernel's lines in its launch order, which is what roseprof
matches them by (roseprof/workload/kernel_stamps.py). `flush` writes the rest, waiting for them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from roseinfer.cuda_ext.stamps import StampLog


@dataclass(frozen=True)
class StampedKernel:
    """A stamping kernel's scratch (`.stamps` [L, BLOCKS, NSTAMP], `.launched`), its CUDA function's name and its
    phases' region names (NSTAMP - 1)."""

    scratch: object
    kernel: str
    regions: tuple[str, ...]


class StampRecorder:
    def __init__(self, kernels: list[StampedKernel], log: StampLog) -> None:
        self.kernels, self.log = kernels, log
        self.pending: list[tuple[list[torch.Tensor | None], torch.cuda.Event]] = []

    def after_step(self) -> None:
        # A kernel whose step took the Triton path (a width not built, no nvcc) launched nothing: its zero stamps
        # must not reach the file as launches.
        launched = [k.scratch.launched for k in self.kernels]
        if not any(launched):
            return
        copies = []
        for k, ran in zip(self.kernels, launched):
            host = None
            if ran:
                host = torch.empty(k.scratch.stamps.shape, dtype=torch.int64, pin_memory=True)
                host.copy_(k.scratch.stamps, non_blocking=True)  # [L, BLOCKS, NSTAMP]
            copies.append(host)
        done = torch.cuda.Event()
        done.record()
        self.pending.append((copies, done))
        while self.pending and self.pending[0][1].query():
            self._write(self.pending.pop(0)[0])

    def flush(self) -> None:
        for copies, done in self.pending:
            done.synchronize()
            self._write(copies)
        self.pending.clear()

    def close(self) -> None:
        """Write what is left and close the stamps file (at the process's exit)."""
        self.flush()
        self.log.close()

    def _write(self, copies: list[torch.Tensor | None]) -> None:
        for k, host in zip(self.kernels, copies):
            if host is not None:  # one launch per layer, in the step's order
                self.log.record_many(k.kernel, k.regions, launch_bounds(host))


def launch_bounds(stamps: torch.Tensor) -> list[list[int]]:
    """A step's stamps [L, BLOCKS, NSTAMP] -> each launch's NSTAMP phase bounds (`stamps.phase_bounds`: the earliest
    block's start, then each boundary where the last block passed it), reduced in torch: this runs after every
    profiled step, on the engine's thread, and a Python loop over the blocks took ~1 ms a kernel a step (H200,
    session 26), longer than the step itself."""
    first = stamps[:, :, :1].amin(dim=1)  # [L, 1]
    rest = stamps[:, :, 1:].amax(dim=1)  # [L, NSTAMP - 1]
    return torch.cat([first, rest], dim=1).tolist()
