"""Per-step block tables for decode: [L, B, M] block ids, built on the host and copied to the device once.

The buffers are batch-major, [B_MAX, L, M]: row b holds the b-th sequence's block list once per layer (one block
pool serves every layer, so the L lines are alike; the kernels take a layer's table each), and a step stacks one
cached [L, M] tensor per sequence. Kernels read layer l's table as the strided view [B, M] (row stride L*M). With
the cache on, each sequence keeps its [L, M] row and writes only the columns of blocks added since; a step then is
one `torch.stack(out=...)` into a preallocated (pinned, on CUDA) buffer and one non-blocking host-to-device copy.
With the cache off (the earlier design) every row is rebuilt from the Python list every step, a line per layer.

Padding rows (CUDA-graph batch buckets, see `roseinfer.cuda_graphs`) point every layer at the pad block.

The static decode path (`roseinfer.decode_slots`) builds only when its batch changes; where more than FRESH_ROWS
sequences of it are new (a new batch: each sequence's first decode step), the block lists are written in one numpy
pass and their rows are made at its next build, the batch's next change, instead of now. A fresh cached
row costs ~6 us a sequence (`torch.zeros`, a numpy view): the first step of a batch of 512 new sequences spent 1.8 to
3.5 ms on them on the CPU machine (scripts/bench_block_tables.py) and 2.5 ms on the H200's host, before its graph's
launch; one pass takes 0.2 to 0.6 ms there (docs/BENCHMARKS.md, session 49). An offline batch that runs to its end
together never pays the rows. The eager path makes them at once: it builds every step.
"""

from __future__ import annotations

import itertools

import numpy as np
import torch

from roseinfer.sequence import Sequence

FRESH_ROWS = 16


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

    def build(self, seqs: list[Sequence], pad_to: int | None = None, one_pass_if_fresh: bool = False) -> int:
        """Fill the host buffer for this batch (plus padding rows up to `pad_to`); returns the width M in use.
        one_pass_if_fresh: where more than FRESH_ROWS sequences are new (no cached row, never built), write the
        block lists in one numpy pass and make their rows at the next build instead (the static decode path, whose
        next build is its batch's next change; the eager path builds every step and makes the rows at once)."""
        if (
            one_pass_if_fresh
            and self.cache
            and len(seqs) > FRESH_ROWS
            and sum(1 for seq in seqs if seq.table_row_blocks == -1) > FRESH_ROWS
        ):
            width = self._build_from_lists(seqs, pad_to)
            for seq in seqs:  # written once without a row: the next build makes their rows (-2: not new)
                if seq.table_row_blocks == -1:
                    seq.table_row_blocks = -2
            return width
        return self._build_from_rows(seqs, pad_to)

    def _build_from_rows(self, seqs: list[Sequence], pad_to: int | None) -> int:
        """`build` by stacking each sequence's row (cached, or rebuilt from its list without the cache)."""
        rows = [self._row(seq) for seq in seqs]
        if pad_to is not None:
            rows += [self.pad_row] * (pad_to - len(seqs))
        torch.stack(rows, out=self.host[: len(rows)])
        return max(len(seq.block_ids) for seq in seqs)

    def _build_from_lists(self, seqs: list[Sequence], pad_to: int | None) -> int:
        """`build` of a batch of many fresh rows: every sequence's block list written into its row of the host buffer
        at once."""
        n = len(seqs)
        counts = np.fromiter((len(s.block_ids) for s in seqs), dtype=np.int64, count=n)  # [B]
        total = int(counts.sum())
        chain = itertools.chain.from_iterable(s.block_ids for s in seqs)
        ids = np.fromiter(chain, dtype=np.int64, count=total)  # [total] the lists, one after another
        starts = np.cumsum(counts) - counts  # [B] each list's first position in ids
        rows = np.repeat(np.arange(n), counts)  # [total] each block's row
        cols = np.arange(total) - np.repeat(starts, counts)  # [total] its index in its list
        # [B, M] one line a sequence, zeros past its blocks (as a cached row's)
        line = np.zeros((n, self.max_blocks), dtype=np.int64)
        line[rows, cols] = ids
        self.host_np[:n] = line[:, None, :]  # every layer's line alike
        if pad_to is not None and pad_to > n:
            self.host_np[n:pad_to] = self.pad_row.numpy()
        return int(counts.max())

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
