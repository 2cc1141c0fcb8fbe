"""Next tokens from a step's logits: greedy where a sequence's temperature is 0, sampled at its temperature
otherwise (from the engine's seeded generator, so runs repeat, or from the request's own when it has a seed),
from the nucleus of its top_p where that is below 1."""

from __future__ import annotations

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
            greedy = torch.argmax(logits, dim=-1)  # [B]
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
