"""The OpenAI request bodies this server takes, as pydantic models (FastAPI's OpenAPI schema comes from them).

Strict types: a string where a number belongs is a 400, not a silent conversion. Fields the OpenAI protocol has
and this engine does not implement are declared, so that a request using them gets a 400 naming the field
(`unimplemented`) rather than silent ignoring; fields the protocol does not have are refused the same way.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr

from roseinfer.serve.errors import APIError

Number = StrictInt | StrictFloat
TokenIds = list[StrictInt]


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    include_usage: StrictBool = False


class _Sampling(BaseModel):
    """What completions and chat completions share."""

    model_config = ConfigDict(extra="forbid")

    model: StrictStr | None = None
    max_tokens: StrictInt | None = Field(default=None, description="tokens to generate (default 16)")
    temperature: Number = 1.0
    top_p: Number = 1.0
    seed: StrictInt | None = Field(default=None, ge=-(2**63), lt=2**63, description="a 64-bit signed integer")
    stop: StrictStr | list[StrictStr] | None = None
    ignore_eos: StrictBool = False
    stream: StrictBool = False
    stream_options: StreamOptions | None = None
    user: StrictStr | None = None
    # Protocol fields this engine does not implement: a request that sets them otherwise than the default is
    # answered 400 naming the field.
    n: StrictInt = 1
    logprobs: Any = None
    presence_penalty: Number = 0.0
    frequency_penalty: Number = 0.0
    logit_bias: dict[str, Number] | None = None

    def check_unimplemented(self) -> None:
        if self.n != 1:
            raise APIError(400, "n > 1 is not implemented: ask for one choice per prompt", "n")
        if self.logprobs not in (None, False):
            raise APIError(400, "logprobs are not implemented", "logprobs")
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name) != 0:
                raise APIError(400, f"{name} is not implemented", name)
        if self.logit_bias:
            raise APIError(400, "logit_bias is not implemented", "logit_bias")
        if not 0 <= self.temperature <= 2:
            raise APIError(400, f"temperature must be between 0 and 2, got {self.temperature}", "temperature")
        if not 0 < self.top_p <= 1:
            raise APIError(400, f"top_p must be in (0, 1], got {self.top_p}", "top_p")
        if self.stream_options is not None and not self.stream:
            raise APIError(400, "stream_options needs stream: true", "stream_options")

    @property
    def stops(self) -> list[str]:
        stops = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        if any(s == "" for s in stops):
            raise APIError(400, "stop strings must not be empty", "stop")
        if len(stops) > 4:
            raise APIError(400, "at most 4 stop strings", "stop")
        return stops


class CompletionRequest(_Sampling):
    prompt: StrictStr | TokenIds | list[StrictStr | TokenIds] = Field(
        description="a string, a list of token ids, or a list of either (one choice each)"
    )
    echo: StrictBool = False
    best_of: StrictInt | None = None
    suffix: StrictStr | None = None

    def check_unimplemented(self) -> None:
        super().check_unimplemented()
        if self.echo:
            raise APIError(400, "echo is not implemented", "echo")
        if self.best_of not in (None, 1):
            raise APIError(400, "best_of is not implemented", "best_of")
        if self.suffix:
            raise APIError(400, "suffix is not implemented", "suffix")

    def prompts(self) -> list[str | list[int]]:
        """The prompts of the batch, each a string or token ids."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if not p:
            raise APIError(400, "prompt is empty", "prompt")
        if isinstance(p[0], int):
            return [p]
        return list(p)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "user", "assistant", "tool", "developer"]
    content: StrictStr


class ChatRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
