"""Per-step block tables for decode: [L, B, M] block ids, built on the host and copied to the device once.

With the cache on, each sequence keeps one padded row per layer and rebuilds it only when that layer's block
list changed; a step then is one `torch.stack(out=...)` into a preallocated (pinned, on CUDA) buffer and one
non-blocking host-to-device copy. With the cache off (the earlier design) every row is rebuilt from the
Python lists every step.
"""

from __future__ import annotations

import torch

from roseinfer.sequence import Sequence


class BlockTables:
    def __init__(
        self, num_layers: int, max_batch: int, max_blocks: int, device: torch.device, cache: bool = True
    ):
        self.num_layers = num_layers
        self.max_blocks = max_blocks
        self.device = device
        self.cache = cache
        pin = device.type == "cuda"
        # Host staging buffer: rows are layer-major ([L*B, M] viewed as [L, B, M]).
        self.host = torch.zeros(num_layers * max_batch, max_blocks, dtype=torch.int64, pin_memory=pin)
        self.dev = self.host if device.type == "cpu" else torch.zeros_like(self.host, device=device)

    def _row(self, seq: Sequence, layer: int) -> torch.Tensor:
        blocks = seq.block_ids[layer]
        if not self.cache:
            return torch.tensor(blocks + [0] * (self.max_blocks - len(blocks)), dtype=torch.int64)
        if seq.table_row_blocks[layer] != len(blocks) or seq.table_rows[layer] is None:
            # Blocks are only ever appended (or the last one swapped by copy-on-write, which the engine
            # signals by resetting the count), so a row changes exactly when the block count does.
            row = torch.zeros(self.max_blocks, dtype=torch.int64)
            row[: len(blocks)] = torch.tensor(blocks, dtype=torch.int64)
            seq.table_rows[layer] = row
            seq.table_row_blocks[layer] = len(blocks)
        return seq.table_rows[layer]

    def build(self, seqs: list[Sequence]) -> int:
        """Fill the host buffer for this batch; returns the width M in use (blocks of the longest sequence)."""
        rows = [self._row(seq, layer) for layer in range(self.num_layers) for seq in seqs]
        n = len(rows)
        torch.stack(rows, out=self.host[:n])
        return max(len(seq.block_ids[0]) for seq in seqs)

    def to_device(self, batch: int, width: int) -> torch.Tensor:
        """[L, B, width] block tables on the engine's device (one copy on CUDA)."""
        n = self.num_layers * batch
        if self.dev is not self.host:
            self.dev[:n].copy_(self.host[:n], non_blocking=True)
        return self.dev[:n].view(self.num_layers, batch, self.max_blocks)[:, :, : max(width, 1)]
