"""A large bucket's decode step as two halves of its batch on two streams (`GraphKernels.halves_from`).

At a few hundred rows a GPT-2 step is two kinds of kernels that wait on different things: the paged attention
reads each sequence's past from memory (bandwidth-bound), the GEMMs multiply the batch by the weights (bound by
their tensor-core work and their blocks' depth along K). One stream runs them one after the other, so each kind
leaves the other's resource idle. Split the batch in two and the halves have no data in common: on two streams
(forked from the step's, joined back before it ends; inside a CUDA graph they become two branches of it) one
half's attention can run beside the other half's GEMMs. This is NanoFlow's nano-batching, with two nano-batches
(Zhu et al., 2024).

Each half's kernels are those of a bucket of its rows (`roseinfer.cuda_graphs` enters the kernel choices once for
both). The halves' launches interleave a block at a time (`GPT2.steps`), so that with `take_turns` each half's
attention can wait for the other's: half 0's attention in layer l after half 1's in layer l - 1, half 1's after
half 0's in layer l. The two attentions then never compete for bandwidth, and each runs beside the other half's
linears. Without CUDA the halves run one after the other on the one device (what CPU tests check: the same
logits and tokens as one pass).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch

# part(lo, hi, turn, logits_out): the step of rows [lo, hi) one block at a time, then (logits, greedy tokens)
Part = Callable[..., Iterator]


class TwoHalves:
    def __init__(self, n_layer: int, device: torch.device, take_turns: bool) -> None:
        self.n_layer = n_layer
        self.cuda = device.type == "cuda"
        self.take_turns = take_turns and self.cuda
        # the step's own streams, made once: a captured graph's branches are recorded on them
        self.streams = (torch.cuda.Stream(device), torch.cuda.Stream(device)) if self.cuda else (None, None)

    def run(self, bucket: int, part: Part, logits_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Logits [bucket, V] (a view of `logits_out` [bucket, V_PAD], whose rows each half's lm_head writes) and
        greedy tokens [bucket] of the step of rows [0, bucket) run as two halves."""
        half = bucket // 2
        turns = Turns(self.n_layer) if self.take_turns else None
        main = torch.cuda.current_stream() if self.cuda else None
        parts = []
        for i, stream in enumerate(self.streams):
            if stream is not None:
                stream.wait_stream(main)  # the fork: after whatever the step's stream staged
            turn = turns.half(i) if turns is not None else None
            parts.append(part(i * half, (i + 1) * half, turn, logits_out[i * half : (i + 1) * half]))
        results: list = [None, None]
        # One block of each half in turn: a half's attention waits on an event the other half recorded before it
        # (in the order of the launches), which is what capturing both halves on one thread needs.
        while any(r is None for r in results):
            for i, (stream, steps) in enumerate(zip(self.streams, parts)):
                if results[i] is None:
                    with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
                        results[i] = next(steps)
        for stream in self.streams:
            if stream is not None:
                main.wait_stream(stream)  # the join: the step ends when both halves have
        greedy = torch.cat([results[0][1], results[1][1]])  # [bucket]
        vocab = results[0][0].shape[1]
        return logits_out[:, :vocab], greedy


class Turns:
    """The halves' attention kernels one at a time, alternating layer by layer (see the module's docstring): an
    event each half records after its attention in each layer, which the other half's next attention waits on."""

    def __init__(self, n_layer: int) -> None:
        self.done = [[torch.cuda.Event() for _ in range(n_layer)] for _ in range(2)]  # [half][layer]

    def half(self, i: int) -> Callable:
        """The wrapper of half i's KV context."""
        mine, theirs = self.done[i], self.done[1 - i]

        def before(layer: int):  # half 0 goes first in each layer, half 1 after it
            if i == 1:
                return theirs[layer]
            return theirs[layer - 1] if layer > 0 else None

        return lambda kv: TurnTakingKV(kv, before, mine)


class TurnTakingKV:
    """A decode KV context whose attention waits for the other half's (`Turns`) and says when it is done; all
    else is the wrapped context's."""

    def __init__(
        self, kv, before: Callable[[int], torch.cuda.Event | None], done: list[torch.cuda.Event]
    ) -> None:
        self.kv = kv
        self.before = before
        self.done = done

    def append(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        self.kv.append(layer, k, v)

    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        wait = self.before(layer)
        if wait is not None:
            torch.cuda.current_stream().wait_event(wait)
        out = self.kv.attend(layer, q, k, v)
        self.done[layer].record()
        return out

    def __getattr__(self, name: str):
        return getattr(self.kv, name)
