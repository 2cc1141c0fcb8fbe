"""A request as the engine sees it: its tokens, its KV blocks, its timings."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int = 16
    temperature: float = 0.0  # 0 means greedy
    ignore_eos: bool = False  # keep generating after the end-of-sequence token
    top_p: float = 1.0  # sample from the smallest set of tokens whose probability reaches top_p (1: all)
    seed: int | None = None  # a generator of the request's own (None: the engine's seeded one)

    def __post_init__(self) -> None:
        if not isinstance(self.max_new_tokens, int) or self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an integer >= 1, got {self.max_new_tokens!r}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.seed is not None and not -(2**63) <= self.seed < 2**63:  # torch.Generator.manual_seed's range
            raise ValueError(f"seed must be a 64-bit signed integer, got {self.seed!r}")


class Status(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


@dataclass(eq=False)
class Sequence:
    id: int
    prompt_ids: list[int]
    params: SamplingParams
    arrival_ns: int
    output_ids: list[int] = field(default_factory=list)
    status: Status = Status.WAITING
    finish_reason: str | None = None
    # KV state: its block ids (one pool for every layer) and how many tokens are in the cache.
    block_ids: list[int] = field(default_factory=list)
    num_cached: int = 0
    # Cached block-table row [L, M] (one line per layer, all alike) and the block count it was built from (-1: none,
    # make it; -2: none yet, the lists were written once without it: `roseinfer.block_tables`).
    table_row: torch.Tensor | None = None
    table_row_np: np.ndarray | None = None  # numpy view of table_row
    table_row_blocks: int = -1
    # Timings: emission time of every output token and the decode step that produced it (-1: prefill).
    token_ns: list[int] = field(default_factory=list)
    token_step: list[int] = field(default_factory=list)
    preemptions: int = 0
    # The caller's id for this request (the server's response id), carried into the step log's request record so
    # a client's tokens join the server's steps; None where the caller has none (LLM.generate, the benchmarks).
    request_id: str | None = None
    generator: torch.Generator | None = None  # with params.seed: the request's own, made at its first sample

    def forget_table_row(self) -> None:
        """The block lists changed other than by appending: the cached block-table row is rebuilt next step."""
        self.table_row = None
        self.table_row_np = None
        self.table_row_blocks = -1

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def last_token(self) -> int:
        return self.output_ids[-1] if self.output_ids else self.prompt_ids[-1]

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.output_ids)
