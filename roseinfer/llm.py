"""The public API, in the spirit of vLLM: `LLM(model, device=..., **engine_options).generate(prompts, params)`.

With `tensor_parallel_size=N` the LLM starts ranks 1..N-1 itself (`roseinfer.workers`) and is rank 0: users do not
call torchrun. Call `close()` (or use it as a context manager) to stop them; they also stop when this process
exits."""

from __future__ import annotations

import atexit
from dataclasses import dataclass

from roseinfer import distributed
from roseinfer.config import EngineConfig
from roseinfer.engine import Engine
from roseinfer.sequence import SamplingParams
from roseinfer.tokenizer import load_tokenizer
from roseinfer.workers import RankFailed, Workers, run_requests


@dataclass
class RequestOutput:
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str | None


class LLM:
    def __init__(self, model: str = "gpt2-tiny", device: str = "cpu", **engine_options) -> None:
        self.config = cfg = EngineConfig.from_options(device=device, **engine_options)
        self.workers: Workers | None = None
        if cfg.tensor_parallel_size > 1:
            self.workers = self._start_ranks(model, device, engine_options)
        try:
            self.engine = Engine(model, cfg)
            if self.workers is not None:
                self.workers.wait_ready(cfg.tp_timeout_s)
        except BaseException:
            self.close()  # rank 0 or a worker failed to build its engine: stop the ranks started
            raise
        self.tokenizer = load_tokenizer(model)

    def _start_ranks(self, model: str, device: str, engine_options: dict) -> Workers:
        """Check what fails in one line before any process starts, start ranks 1..N-1, join as rank 0."""
        from roseinfer.sharding import check_ranks

        cfg = self.config
        n = cfg.tensor_parallel_size
        device_type = distributed.torch_device_type(device)
        check_ranks(model, n, device)
        workers = Workers(model, {"device": device, **engine_options}, n)
        workers.wait_started(cfg.tp_timeout_s)
        try:
            distributed.init(n, device_type, cfg.tp_timeout_s, rank=0, init_method=workers.init_method)
        except BaseException:
            workers.close()
            raise
        atexit.register(self.close)  # an LLM never closed still stops its ranks and leaves the group at exit
        return workers

    def close(self) -> None:
        """Stop the tensor-parallel ranks this LLM started and its engine's watch on Python's collections (a
        serving engine's flight recorder); idempotent."""
        engine = getattr(self, "engine", None)  # None when building it failed
        if engine is not None:
            engine.close()
        if self.workers is not None:
            self.workers.close()
            self.workers = None
            distributed.destroy()
            atexit.unregister(self.close)

    def __enter__(self) -> LLM:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        if self.workers is None:
            seqs = run_requests(self.engine, encoded, params)
        else:
            seqs = self._run_on_every_rank(encoded, params)
        return [
            RequestOutput(
                s.prompt_ids, list(s.output_ids), self.tokenizer.decode(s.output_ids), s.finish_reason
            )
            for s in seqs
        ]

    def _run_on_every_rank(self, encoded: list[list[int]], params: SamplingParams):
        """Rank 0's share of a tensor-parallel `generate`: the workers get the same requests and step alike."""
        workers = self.workers
        workers.submit(encoded, params)
        try:
            seqs = run_requests(self.engine, encoded, params)
        except RuntimeError as e:  # a collective failed: name the rank that caused it, in one line
            if isinstance(e, RankFailed):
                raise
            reason = workers.failure(wait_s=2.0)
            self.close()
            raise RankFailed(
                reason or f"tensor parallelism failed on rank 0: {str(e).splitlines()[0]}"
            ) from None
        workers.wait_done(self.config.tp_timeout_s)
        if self.engine.steplog is not None:
            self.engine.steplog.flush()  # as the workers do: every rank's log is complete when generate returns
        return seqs
