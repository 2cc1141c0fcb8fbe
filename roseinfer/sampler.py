"""Next tokens from a step's logits: greedy where a sequence's temperature is 0, sampled at its temperature
otherwise (from the engine's seeded generator, so runs repeat, or from the request's own when it has a seed),
from the nucleus of its top_p where that is below 1.

The greedy tokens of CPU logits come from numpy's argmax, not torch's. torch's CPU argmax is a scalar loop, one
compare-and-select per logit chained through the running maximum, and it is the region of the CPU step most
sensitive to the machine: on the shared 2-core box it took 0.84 ms or 1.9 ms of CPU for the demo's [16, 50257]
logits, step by step, in spells where everything else ran 1.1-1.5x slower (other work on the host's core: seen
with torch.argmax alone outside the engine, on the same data and the same memory), so a run that spent 95% of its
steps in those spells had its p5 in the slow mode and a same-code diff named `roseinfer.argmax` +76% slower.
numpy's argmax is SIMD: 0.16 ms, and 1.2x in those spells, like the rest of the step (docs/BENCHMARKS.md, session
24). Both return the first index of the row's largest value, and of its first NaN where it has one.
"""

from __future__ import annotations

import numpy as np
import torch

from roseinfer.tracing import ARGMAX, region


def sample(
    logits: torch.Tensor,  # [B, V]
    temperatures: list[float],  # [B]
    generator: torch.Generator,
    greedy: torch.Tensor | None = None,  # [B] argmax of the logits where the step computed it already
    top_ps: list[float] | None = None,  # [B] (None: 1 for every row)
    generators: list[torch.Generator | None] | None = None,  # [B] a row's own generator (None: `generator`)
) -> list[int]:
    if greedy is None:
        with region(ARGMAX):
            greedy = argmax(logits)  # [B]
    if all(t == 0 for t in temperatures):
        return greedy.tolist()
    t = torch.tensor([max(x, 1e-6) for x in temperatures], device=logits.device, dtype=torch.float32)
    probs = torch.softmax(logits.float() / t[:, None], dim=-1)  # [B, V]
    if top_ps is not None and any(p < 1 for p in top_ps):
        probs = _nucleus(probs, torch.tensor(top_ps, device=logits.device, dtype=torch.float32))
    if generators is None or all(g is None for g in generators):
        sampled = torch.multinomial(probs, 1, generator=generator).squeeze(1)  # [B]
    else:
        sampled = torch.cat(
            [
                torch.multinomial(probs[i : i + 1], 1, generator=g or generator)[0]
                for i, g in enumerate(generators)
            ]
        )
    is_greedy = torch.tensor([x == 0 for x in temperatures], device=logits.device)
    return torch.where(is_greedy, greedy, sampled).tolist()


# The dtypes numpy's argmax takes as they are (numpy has no bfloat16).
NUMPY_ARGMAX = (torch.float32, torch.float64, torch.float16)


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """logits [B, V] -> int64 [B]: torch.argmax(logits, dim=-1), the same indices, by numpy's SIMD argmax where the
    logits are on the CPU in a dtype numpy has (module docstring: why)."""
    if logits.device.type != "cpu" or logits.dtype not in NUMPY_ARGMAX:
        return torch.argmax(logits, dim=-1)
    return torch.from_numpy(logits.detach().numpy().argmax(axis=-1).astype(np.int64, copy=False))


def _nucleus(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Zero every token outside the smallest set whose probability reaches top_p (per row); the most likely token
    always stays. multinomial renormalizes."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)  # [B, V]
    before = sorted_probs.cumsum(dim=-1) - sorted_probs  # probability of the tokens ranked above each
    outside = before >= top_p[:, None]
    # The first stays whatever top_p is: a tiny one (4.9e-217 is 0.0 in float32) masked every token, and
    # multinomial failed the engine thread on an all-zero row.
    outside[:, 0] = False
    sorted_probs = sorted_probs.masked_fill(outside, 0.0)
    return torch.zeros_like(probs).scatter_(-1, order, sorted_probs)
