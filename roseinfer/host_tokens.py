"""The greedy tokens of a captured decode step, written by its argmax straight into pinned host memory.

Before, the host copied them out after each replay (a device-to-host copy into a pinned buffer, then an event), and
the next replay, launched behind that copy on the same stream, started only once it had finished: at batch 1 on an
H200 the GPU's gap between two replays was 6.7-9.2 us a step with the copy and 1.5 us without it, and a token took
0.128 against 0.137-0.141 ms (docs/BENCHMARKS.md, session 59). Now the argmax's second kernel stores each row's
token into `host` as well (`roseinfer.kernels.argmax`, `to_host`: the GPU writes pinned memory directly), and the
host waits for the step's event alone.

The overlapped decode launches a step before it reads the previous step's tokens, so two steps' tokens are in
flight: `host` has two rows, and each row r of a step writes into row `parity[r]` of it, which then flips, so that
the next step of row r writes the other one. The parity lives on the device (the kernel flips it, so a replay needs
nothing from the host) and is mirrored here (`launched`): a graph's replay and the same step run uncaptured
(`DecodeGraphs.run`, `replay`) both flip it for the rows of their bucket. A step run any other way (its `forward`
called directly) flips the device's alone; the two must then be `reset` before the next read.
"""

from __future__ import annotations

import numpy as np
import torch


class HostTokens:
    """The tokens' two pinned rows [2, B_MAX], each row's parity on the device [B_MAX] and its host mirror."""

    def __init__(self, max_rows: int, device: torch.device) -> None:
        pin = device.type == "cuda"  # (the host side alone runs on CPU machines too: its tests)
        self.host = torch.zeros(2, max_rows, dtype=torch.int64, pin_memory=pin)  # [2, B_MAX]
        self.parity = torch.zeros(max_rows, dtype=torch.int32, device=device)  # [B_MAX]: 0 or 1
        self._parity = np.zeros(max_rows, dtype=np.int64)  # [B_MAX], the host's copy of the same
        # Made once: each step reads through them (a step's host work is Python, docs/BENCHMARKS.md, session 65)
        self._host = self.host.numpy()  # [2, B_MAX], the pinned rows themselves
        self._rows = np.arange(max_rows)  # [B_MAX]

    def rows(self, lo: int, hi: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The argmax's `to_host` for the step part of rows [lo, hi): (host [2, hi - lo], parity [hi - lo])."""
        return self.host[:, lo:hi], self.parity[lo:hi]

    def reset(self) -> None:
        """Every parity back to 0 on both sides (after a capture's warm-up runs, which flipped the device's)."""
        self.parity.zero_()
        self._parity[:] = 0

    def launched(self, rows: int) -> np.ndarray:
        """A step of `rows` rows was launched: the row of `host` each of its rows writes [rows]."""
        parity = self._parity[:rows]
        which = parity.copy()
        np.bitwise_xor(which, 1, out=parity)
        return which

    def read(self, which: np.ndarray, batch: int) -> list[int]:
        """The first `batch` rows' tokens of the step whose `launched` gave `which` (once that step has run)."""
        return self._host[which[:batch], self._rows[:batch]].tolist()
