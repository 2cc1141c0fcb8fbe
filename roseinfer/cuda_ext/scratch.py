"""The output buffers of a one-row fused kernel that adds its result into float32 with atomics (issue 50).

`fused_mlp` and `fused_attn` each add their output into a float32 buffer that must be zero on entry, and read by the
kernel after them. `LayerScratch` keeps one buffer per layer [n_layer, C], zeros: layer L's launch adds into
bufs[L] and zeroes bufs[(L+1) % n_layer], the buffer the next launch of the same kernel adds into, whose last reader
(the kernel after that layer's launch, a step before) finished before layer L's launch stopped waiting. Every step
runs its layers in order, so the buffer a launch adds into is zero. Made once, before the step is captured.
"""

from __future__ import annotations

import torch


class LayerScratch:
    """bufs [n_layer, width] float32; stamps: a stamp buffer per layer [n_layer, blocks, nstamp] (regions inside the
    kernel) where `stamps`, else [n_layer, 0]; `launched`: whether any launch used them (a step that took the
    Triton path, a width not built or no nvcc, left no stamps, and its zeros must not reach the stamps file as
    launches)."""

    def __init__(
        self, what: str, n_layer: int, width: int, blocks: int, nstamp: int, device, stamps: bool
    ) -> None:
        if n_layer < 2:  # one layer would zero the buffer it adds into
            raise ValueError(f"the {what}'s buffers need at least 2 layers")
        self.bufs = torch.zeros(n_layer, width, dtype=torch.float32, device=device)  # [L, C]
        shape = (n_layer, blocks, nstamp) if stamps else (n_layer, 0)
        self.stamps = torch.zeros(shape, dtype=torch.int64, device=device)  # [L, BLOCKS, NSTAMP] or [L, 0]
        self.launched = False

    def for_layer(self, layer: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(out, clear, stamps) of layer `layer`'s launch."""
        n = self.bufs.shape[0]
        return self.bufs[layer], self.bufs[(layer + 1) % n], self.stamps[layer]
