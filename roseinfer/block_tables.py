"""Per-step block tables for decode: [L, B, M] block ids, built on the host and copied to the device once.

The buffers are batch-major, [B_MAX, L, M]: row b holds the b-th sequence's block list once per layer (one block
pool serves every layer, so the L lines are alike; the kernels take a layer's table each), and a step stacks one
cached [L, M] tensor per sequence. Kernels read layer l's table as the strided view [B, M] (row stride L*M). With
the cache on, each sequence keeps its [L, M] row and writes only the columns of blocks added since; a step then is
one `torch.stack(out=...)` into a preallocated (pinned, on CUDA) buffer and one non-blocking host-to-device copy.
With the cache off (the earlier design) every row is rebuilt from the Python list every step, a line per layer.

Padding rows (CUDA-graph batch buckets, see `roseinfer.cuda_graphs`) point every layer at the pad block.
"""

from __future__ import annotations

import numpy as np
import torch

from roseinfer.sequence import Sequence


class BlockTables:
    def __init__(
        self,
        num_layers: int,
        max_batch: int,
        max_blocks: int,
        device: torch.device,
        cache: bool = True,
        pad_block: int = 0,
    ):
        self.num_layers = num_layers
        self.max_blocks = max_blocks
        self.device = device
        self.cache = cache
        pin = device.type == "cuda"
        self.host = torch.zeros(max_batch, num_layers, max_blocks, dtype=torch.int64, pin_memory=pin)
        self.pad_row = torch.full((num_layers, max_blocks), pad_block, dtype=torch.int64)
        # Padding everywhere until rows are written, so a graph captured before any step reads the pad block.
        self.host[:] = self.pad_row
        self.host_np = self.host.numpy()  # the same memory, for numpy reads on the host
        self.dev = self.host if device.type == "cpu" else self.host.to(device)
        self._views: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def _row(self, seq: Sequence) -> torch.Tensor:
        ids = seq.block_ids
        n = len(ids)
        if not self.cache:
            line = ids + [0] * (self.max_blocks - n)
            return torch.tensor([line] * self.num_layers, dtype=torch.int64)
        if seq.table_row is None or seq.table_row_blocks < 0:
            seq.table_row = torch.zeros(self.num_layers, self.max_blocks, dtype=torch.int64)
            seq.table_row_np = seq.table_row.numpy()  # the same memory
            seq.table_row_blocks = 0
        old = seq.table_row_blocks
        if old != n:
            # Blocks are only ever appended (or the last one swapped by copy-on-write, which the engine signals
            # by resetting the count to -1), so only the new tail is written, in every layer's line at once,
            # through the numpy view: when 64 sequences roll over in one step, one column each costs 89 us on the
            # CPU machine, against 388 us for slices of every line and more for a new tensor.
            if n == old + 1:
                seq.table_row_np[:, old] = ids[old]
            else:
                seq.table_row_np[:, old:n] = ids[old:n]
            seq.table_row_blocks = n
        return seq.table_row

    def build(self, seqs: list[Sequence], pad_to: int | None = None) -> int:
        """Fill the host buffer for this batch (plus padding rows up to `pad_to`); returns the width M in use."""
        rows = [self._row(seq) for seq in seqs]
        if pad_to is not None:
            rows += [self.pad_row] * (pad_to - len(seqs))
        torch.stack(rows, out=self.host[: len(rows)])
        return max(len(seq.block_ids) for seq in seqs)

    def put_blocks(self, rows: np.ndarray, cols: np.ndarray, blocks: np.ndarray) -> None:
        """One new block per listed row, in every layer, written straight into the host buffer: rows [K] of the
        batch the buffer holds, cols [K] each block's index in its sequence's list, blocks [K]. One numpy write
        instead of K cached rows written and the batch restacked; each sequence's cached row catches up (`_row`
        writes the columns it lacks) when the buffer is next stacked."""
        self.host_np[rows, :, cols] = blocks[:, None]  # [K, L]

    def to_device(self, batch: int) -> None:
        """Copy the first `batch` rows over (one non-blocking copy on CUDA; nothing to do on CPU)."""
        if self.dev is self.host:
            return
        views = self._views.get(batch)
        if views is None:  # slicing costs a few us per step on a slow host; slice once per batch size
            views = self._views[batch] = (self.dev[:batch], self.host[:batch])
        views[0].copy_(views[1], non_blocking=True)

    def device_view(self, batch: int, width: int) -> torch.Tensor:
        """[L, batch, width] block tables on the engine's device; a strided view of the buffer."""
        return self.dev[:batch, :, : max(width, 1)].permute(1, 0, 2)
