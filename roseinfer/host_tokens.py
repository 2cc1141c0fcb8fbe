"""The greedy tokens of a captured decode step, written by its argmax straight into pinned host memory.

Before, the host copied them out after each replay (a device-to-host copy into a pinned buffer, then an event), and
the next replay, launched behind that copy on the same stream, started only once it had finished: at batch 1 on an
H200 the copy left the GPU idle about 9 us a step, 0.138 against 0.129 ms a token with no copy at all
(docs/BENCHMARKS.md, session 59). Now the argmax's second kernel stores each row's token into `host` as well
(`roseinfer.kernels.argmax`, `to_host`: the GPU writes pinned memory directly), and the host waits for the step's
event alone.

The overlapped decode launches a step before it reads the previous step's tokens, so two steps' tokens are in
flight: `host` has two rows, and a step writes row r's token into row (the steps that have run row r before) % 2.
That count lives on the device (`steps`, advanced by the kernel itself, so a replay needs nothing from the host)
and is mirrored here (`launched`): a graph's replay and the same step run uncaptured both advance it, for the
rows of their bucket.
"""

from __future__ import annotations

import numpy as np
import torch


class HostTokens:
    """The tokens' two pinned rows [2, B_MAX], the device's count of steps a row [B_MAX] and its host mirror."""

    def __init__(self, max_rows: int, device: torch.device) -> None:
        self.host = torch.zeros(2, max_rows, dtype=torch.int64, pin_memory=True)  # [2, B_MAX]
        self.steps = torch.zeros(max_rows, dtype=torch.int32, device=device)  # [B_MAX]
        self._steps = np.zeros(max_rows, dtype=np.int64)  # [B_MAX], the host's count of the same

    def rows(self, lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The argmax's `to_host` for the step part of rows [lo, hi): (host [2, hi - lo], steps [hi - lo])."""
        return self.host[:, lo:hi], self.steps[lo:hi]

    def reset(self) -> None:
        """Both counts to zero (after the warm-up runs of a capture, whose kernels advanced the device's)."""
        self.steps.zero_()
        self._steps[:] = 0

    def launched(self, rows: int) -> np.ndarray:
        """A step of `rows` rows was launched: the row of `host` each of its rows writes [rows]."""
        which = self._steps[:rows] % 2
        self._steps[:rows] += 1
        return which

    def read(self, which: np.ndarray, batch: int) -> list[int]:
        """The first `batch` rows' tokens of the step whose `launched` gave `which` (once that step has run)."""
        return self.host.numpy()[which[:batch], np.arange(batch)].tolist()
