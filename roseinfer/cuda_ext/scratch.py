"""The output buffers of a one-row fused kernel that adds its result into float32 with atomics (issue 50).

`fused_mlp` and `fused_attn` each add their output into a float32 buffer that must be zero on entry, and read by the
kernel after them. `LayerScratch` keeps one buffer per layer [n_layer, width] (C; the MLP's SPLIT_ROWS C, its output
a split sum: `roseinfer.kernels.split_sum`), zeros: layer L's launch adds into
bufs[L] and zeroes bufs[(L+1) % n_layer], the buffer the next launch of the same kernel adds into, whose last reader
(the kernel after that layer's launch, a step before) finished before layer L's launch stopped waiting. Every step
runs its layers in order, so the buffer a launch adds into is zero. Made once, before the step is captured.
"""

from __future__ import annotations

import torch


class LayerScratch:
    """bufs [n_layer, width] float32; a stamp buffer per layer (regions inside the kernel) where `stamps`:
    `stamp_rows` [n_layer, nstamp, blocks], what the kernel writes (stamp-major, so that the recorder reduces each
    stamp over the blocks along a contiguous axis), and `stamps`, the same memory by block [n_layer, blocks, nstamp];
    both empty without stamps. `launched`: whether any launch used them (a step that took the Triton path, a width
    not built or no nvcc, left no stamps, and its zeros must not reach the stamps file as launches)."""

    def __init__(
        self, what: str, n_layer: int, width: int, blocks: int, nstamp: int, device, stamps: bool
    ) -> None:
        if n_layer < 2:  # one layer would zero the buffer it adds into
            raise ValueError(f"the {what}'s buffers need at least 2 layers")
        self.bufs = torch.zeros(n_layer, width, dtype=torch.float32, device=device)  # [L, C]
        shape = (n_layer, nstamp, blocks) if stamps else (n_layer, 0, 0)
        self.stamp_rows = torch.zeros(shape, dtype=torch.int64, device=device)  # [L, NSTAMP, BLOCKS]
        self.stamps = self.stamp_rows.transpose(1, 2)  # [L, BLOCKS, NSTAMP], a view
        self.launched = False

    def for_layer(self, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(out, clear, stamps [NSTAMP, BLOCKS], contiguous) of layer `layer`'s launch."""
        n = self.bufs.shape[0]
        return self.bufs[layer], self.bufs[(layer + 1) % n], self.stamp_rows[layer]


def flat_stamps(stamps: torch.Tensor, nstamp: int, blocks: int) -> torch.Tensor:
    """A launch's stamp buffer as its kernel takes it, flat: empty, or [nstamp, blocks] and contiguous
    (`LayerScratch.for_layer`'s). The kernel writes stamp k of block b at k * blocks + b, so a buffer of another
    shape would be filled where its reader does not look (a by-block [blocks, nstamp] one, say)."""
    if stamps.numel() and tuple(stamps.shape) != (nstamp, blocks):
        raise ValueError(f"stamps must be [{nstamp}, {blocks}] (NSTAMP, BLOCKS), not {tuple(stamps.shape)}")
    return stamps.view(-1)
