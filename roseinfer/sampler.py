"""Next tokens from a step's logits: greedy where a sequence's temperature is 0, sampled at its temperature
otherwise (from the engine's seeded generator, so runs repeat)."""

from __future__ import annotations

import torch

from roseinfer.tracing import ARGMAX, region


def sample(
    logits: torch.Tensor,  # [B, V]
    temperatures: list[float],  # [B]
    generator: torch.Generator,
    greedy: torch.Tensor | None = None,  # [B] argmax of the logits where the step computed it already
) -> list[int]:
    if greedy is None:
        with region(ARGMAX):
            greedy = torch.argmax(logits, dim=-1)  # [B]
    if all(t == 0 for t in temperatures):
        return greedy.tolist()
    t = torch.tensor([max(x, 1e-6) for x in temperatures], device=logits.device, dtype=torch.float32)
    probs = torch.softmax(logits.float() / t[:, None], dim=-1)  # [B, V]
    sampled = torch.multinomial(probs, 1, generator=generator).squeeze(1)  # [B]
    is_greedy = torch.tensor([x == 0 for x in temperatures], device=logits.device)
    return torch.where(is_greedy, greedy, sampled).tolist()
