"""The public API, in the spirit of vLLM: `LLM(model, device=..., **engine_options).generate(prompts, params)`."""

from __future__ import annotations

from dataclasses import dataclass

from roseinfer.config import EngineConfig
from roseinfer.engine import Engine
from roseinfer.sequence import SamplingParams
from roseinfer.tokenizer import load_tokenizer


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str | None


class LLM:
    def __init__(self, model: str = "gpt2-tiny", device: str = "cpu", **engine_options) -> None:
        self.config = EngineConfig.from_options(device=device, **engine_options)
        self.engine = Engine(model, self.config)
        self.tokenizer = load_tokenizer(model)

    def encode(self, prompt: str | list[int]) -> list[int]:
        if isinstance(prompt, str):
            return self.tokenizer.encode(prompt)
        return [int(t) for t in prompt]

    def generate(
        self, prompts: list[str | list[int]] | str | list[int], params: SamplingParams | None = None
    ) -> list[RequestOutput]:
        """Generate for every prompt and return one RequestOutput per prompt, in order.

        `prompts` is a list of prompts (each a string or a list of token ids) or a single prompt. An empty list
        returns an empty list (nothing is queued); an empty prompt raises ValueError, and then no prompt of the
        call is queued. `params` applies to every prompt (default: SamplingParams())."""
        params = params or SamplingParams()
        if isinstance(prompts, str) or (
            isinstance(prompts, list) and prompts and isinstance(prompts[0], int)
        ):
            prompts = [prompts]
        encoded = [self.encode(p) for p in prompts]
        for ids in encoded:  # validate all before admitting any, so a bad prompt leaves nothing queued
            if not ids:
                raise ValueError("prompt is empty: give at least one token")
        seqs = [self.engine.add_request(ids, params) for ids in encoded]
        while self.engine.has_unfinished():
            self.engine.step()
        return [
            RequestOutput(
                s.prompt_ids, list(s.output_ids), self.tokenizer.decode(s.output_ids), s.finish_reason
            )
            for s in seqs
        ]
