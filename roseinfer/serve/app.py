"""The HTTP app: OpenAI's completions and chat completions, /v1/models, /health, /version, /metrics, /debug/steps,
/profile/* (profiling.py).

FastAPI on uvicorn (docs/BENCHMARKS.md has the per-request overhead measured against bare Starlette); its
OpenAPI schema (/openapi.json) is what the schemathesis test fuzzes. Every error is OpenAI-shaped (errors.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import AsyncIterator

import msgspec
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

import roseinfer
from roseinfer.sequence import SamplingParams
from roseinfer.serve import errors, profiling
from roseinfer.serve.bridge import DRAINING, FAILED, READY, EngineBridge, Job
from roseinfer.serve.debug_steps import debug_steps as debug_steps_body
from roseinfer.serve.errors import APIError, error_body
from roseinfer.serve.limits import Limits, ServeSettings
from roseinfer.serve.protocol import ChatRequest, CompletionRequest
from roseinfer.serve.text import IncrementalText

log = logging.getLogger("roseinfer.serve")

DEFAULT_MAX_TOKENS = 16  # OpenAI's default for completions
LONG_PROMPT = 4096  # characters or token ids: encoded off the event loop (Completer.encode_async)
# SSE events are written once per step per stream: msgspec encodes one in 0.9 us where json.dumps takes 7 us.
_encode = msgspec.json.Encoder().encode


def _event(payload: dict) -> bytes:
    return b"data: " + _encode(payload) + b"\n\n"


def create_app(bridge: EngineBridge, tokenizer, settings: ServeSettings, metrics=None) -> FastAPI:
    """`metrics`: a metrics.Collector (None: no /metrics)."""
    app = FastAPI(title="roseinfer", version=roseinfer_version(), docs_url=None, redoc_url=None)
    errors.install(app)
    app.add_middleware(Limits, settings=settings)
    completer = Completer(bridge, tokenizer, settings)

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request):
        body.check_unimplemented()
        completer.check_model(body.model)
        prompts = [await completer.encode_async(p, "prompt") for p in body.prompts()]
        return await completer.run(body, prompts, request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: ChatRequest, request: Request):
        body.check_unimplemented()
        completer.check_model(body.model)
        if completer.template is None:
            raise APIError(
                400,
                "this model has no chat template: start the server with --chat-template FILE (Jinja), or use "
                "/v1/completions",
                "messages",
                "no_chat_template",
            )
        messages = [m.model_dump() for m in body.messages]
        text = completer.template.render(messages=messages, add_generation_prompt=True)
        return await completer.run(body, [await completer.encode_async(text, "messages")], request, chat=True)

    @app.get("/v1/models")
    async def models():
        card = {
            "id": settings.model_name,
            "object": "model",
            "created": completer.created,
            "owned_by": "roseinfer",
            "max_model_len": settings.max_model_len,
        }
        return {"object": "list", "data": [card]}

    @app.get("/health")
    async def health():
        stalled = bridge.stalled_s()
        if bridge.state == READY and stalled <= settings.stall_s:
            return {"status": "ok"}
        if bridge.state == READY:
            return JSONResponse(error_body(503, f"engine stalled: one step has run for {stalled:.0f} s"), 503)
        message = f"engine {bridge.state}" + (f": {bridge.failure}" if bridge.failure else "")
        return JSONResponse(error_body(503, message), status_code=503)

    @app.get("/version")
    async def version():
        return {"version": roseinfer_version()}

    @app.get("/debug/steps")
    async def debug_steps(last: str | None = None):
        return await debug_steps_body(bridge, last)  # debug_steps.py: the flight recorder's last steps

    profiling.install(app, bridge, settings.profile_dir)  # /profile/*: capture windows (--enable-profiling)

    if metrics is not None:
        from roseinfer.serve.metrics import registry_for, render_for

        registry = registry_for(metrics)

        @app.get("/metrics")
        async def prometheus_metrics(request: Request):
            snapshot = await bridge.query("metrics")  # the core answers between two steps
            if snapshot is not None:
                metrics.snapshot = snapshot  # else (stopped, failed): the last one it gave
            metrics.not_yet_admitted = bridge.num_submitted_not_added()
            body, content_type = render_for(registry, request.headers.get("accept"))  # OpenMetrics: exemplars
            return Response(body, media_type=content_type)

    return app


def roseinfer_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("roseinfer")
    except PackageNotFoundError:
        return getattr(roseinfer, "__version__", "0.0.0")


class Completer:
    """Turns a validated request into a job, and the job's tokens into an OpenAI answer (whole or streamed)."""

    def __init__(self, bridge: EngineBridge, tokenizer, settings: ServeSettings) -> None:
        self.bridge = bridge
        self.tokenizer = tokenizer
        self.settings = settings
        self.created = int(time.time())
        self.template = None
        if settings.chat_template is not None:
            import jinja2.sandbox

            self.template = jinja2.sandbox.ImmutableSandboxedEnvironment().from_string(settings.chat_template)

    def check_model(self, model: str | None) -> None:
        if model is not None and model != self.settings.model_name:
            raise APIError(
                404, f"model {model!r} does not exist; this server serves {self.settings.model_name!r}", "model",
                "model_not_found",
            )  # fmt: skip

    async def encode_async(self, prompt: str | list[int], param: str) -> list[int]:
        """`encode`, on a worker thread for a long prompt: tokenizing and checking a body of up to --max-body-bytes
        takes tens of milliseconds, which on the event loop would hold back every other stream's chunks."""
        if len(prompt) < LONG_PROMPT:
            return self.encode(prompt, param)
        return await asyncio.to_thread(self.encode, prompt, param)

    def encode(self, prompt: str | list[int], param: str) -> list[int]:
        ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else prompt
        if not ids:
            raise APIError(400, "prompt is empty: give at least one token", param)
        vocab = self.settings.vocab_size
        bad = next((t for t in ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise APIError(400, f"token id {bad} is outside the vocabulary (0..{vocab - 1})", param)
        if len(ids) >= self.settings.max_model_len:
            raise APIError(
                400,
                f"prompt is {len(ids)} tokens; the model's context is {self.settings.max_model_len}, "
                "which must hold the prompt and at least one generated token",
                param,
                "context_length_exceeded",
            )
        return list(ids)

    def _params(self, body, prompts: list[list[int]]) -> SamplingParams:
        max_tokens = DEFAULT_MAX_TOKENS if body.max_tokens is None else body.max_tokens
        if max_tokens < 1:
            raise APIError(400, f"max_tokens must be >= 1, got {max_tokens}", "max_tokens")
        longest = max(len(p) for p in prompts)
        if longest + max_tokens > self.settings.max_model_len:
            raise APIError(
                400,
                f"prompt ({longest} tokens) plus max_tokens ({max_tokens}) exceeds the model's context "
                f"({self.settings.max_model_len})",
                "max_tokens",
                "context_length_exceeded",
            )
        return SamplingParams(
            max_new_tokens=max_tokens,
            temperature=float(body.temperature),
            ignore_eos=body.ignore_eos,
            top_p=float(body.top_p),
            seed=body.seed,
        )

    def _admit(self, prompts: list[list[int]], params: SamplingParams, prefix: str) -> Job:
        bridge = self.bridge
        if bridge.state != READY:
            reason = {DRAINING: "the server is shutting down", FAILED: f"the {bridge.failure}"}.get(
                bridge.state, f"the engine is {bridge.state}"
            )
            raise APIError(503, f"not accepting requests: {reason}", headers={"Retry-After": "1"})
        if len(prompts) > self.settings.max_waiting:
            # Never admissible, however long the client retries: the client's mistake, not a busy server.
            raise APIError(
                400,
                f"{len(prompts)} prompts in one request; this server queues at most {self.settings.max_waiting} "
                "(--max-waiting): send fewer at a time",
                "prompt",
            )
        waiting = bridge.num_waiting()
        if waiting + len(prompts) > self.settings.max_waiting:
            raise APIError(
                503,
                f"server busy: {waiting} requests waiting (--max-waiting {self.settings.max_waiting})",
                code="queue_full",
                headers={"Retry-After": "1"},
            )
        # The id is final before the engine core sees the job: it writes it into the step log.
        job = Job(f"{prefix}-{uuid.uuid4().hex}", prompts, params)
        bridge.submit(job)
        return job

    async def run(self, body, prompts: list[list[int]], request: Request, chat: bool):
        stops = body.stops
        params = self._params(body, prompts)
        job = self._admit(prompts, params, "chatcmpl" if chat else "cmpl")
        started = time.monotonic()
        if body.stream:
            include_usage = body.stream_options is not None and body.stream_options.include_usage
            stream = self._stream(job, stops, chat, include_usage, started)
            return StreamingResponse(
                stream, media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
            )
        try:
            answer = await self._whole(job, stops, request, chat, started)
        finally:
            self._end(job, started)
        return answer

    def _end(self, job: Job, started: float) -> None:
        """The answer is written (or the client is gone): anything still in the engine leaves it."""
        if job.done:
            self.bridge.release(job)
        else:
            self.bridge.abort(job)
        if self.settings.log_requests:
            generated = sum(c.num_generated for c in job.choices)
            outcome = job.error or ",".join(str(c.finish_reason) for c in job.choices)
            log.warning("%s %d tokens in %.3fs: %s", job.id, generated, time.monotonic() - started, outcome)

    async def _wait(self, job: Job, started: float) -> None:
        """Until the job has something new; raises APIError on timeout or an engine failure."""
        remaining = started + self.settings.request_timeout_s - time.monotonic()
        try:
            await asyncio.wait_for(job.event.wait(), timeout=max(remaining, 0.0))
        except asyncio.TimeoutError:
            raise APIError(408, f"request timed out after {self.settings.request_timeout_s:g}s") from None
        job.event.clear()
        if job.error is not None:
            raise APIError(500, job.error, code="engine_failed")

    def _chunk_choice(self, chat: bool, index: int, text: str, ids, steps, reason, first: bool) -> dict:
        if chat:
            delta = {"role": "assistant", "content": text} if first else {"content": text}
            return {
                "index": index,
                "delta": delta,
                "finish_reason": reason,
                "token_ids": ids,
                "token_steps": steps,
            }
        return {"index": index, "text": text, "logprobs": None, "finish_reason": reason, "token_ids": ids,
                "token_steps": steps}  # fmt: skip

    async def _stream(
        self, job: Job, stops: list[str], chat: bool, include_usage: bool, started: float
    ) -> AsyncIterator[bytes]:
        head = {
            "id": job.id,
            "object": "chat.completion.chunk" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.settings.model_name,
        }
        texts = [IncrementalText(self.tokenizer, stops) for _ in job.choices]
        ended = [False] * len(job.choices)
        try:
            while not all(ended):
                try:
                    await self._wait(job, started)
                except APIError as e:
                    # Not job.error (the engine's failure): a timed-out request is still in the engine, and
                    # _end takes it out.
                    yield _event(error_body(e.status, e.message, code=e.code))
                    return
                out = []
                for i, choice in enumerate(job.choices):
                    if ended[i] or (not choice.new_ids and choice.finish_reason is None):
                        continue
                    ids, steps = choice.new_ids, choice.new_steps
                    choice.new_ids, choice.new_steps = [], []
                    first = choice.num_generated == 0
                    choice.num_generated += len(ids)
                    reason = choice.finish_reason
                    text = texts[i].push(ids, final=reason is not None)
                    if texts[i].stopped and reason is None:
                        reason = "stop"
                        self.bridge.abort(job, i, "stop")
                    ended[i] = reason is not None
                    out.append(self._chunk_choice(chat, i, text, ids, steps, reason, first))
                if out:
                    yield _event({**head, "choices": out})
            if include_usage:
                yield _event({**head, "choices": [], "usage": self._usage(job)})
            yield b"data: [DONE]\n\n"
        finally:
            self._end(job, started)

    async def _whole(self, job: Job, stops: list[str], request: Request, chat: bool, started: float) -> dict:
        texts = [IncrementalText(self.tokenizer, stops) for _ in job.choices]
        ids: list[list[int]] = [[] for _ in job.choices]
        steps: list[list[int]] = [[] for _ in job.choices]
        pieces: list[list[str]] = [[] for _ in job.choices]
        reasons: list[str | None] = [None] * len(job.choices)
        while any(r is None for r in reasons):
            waiter = asyncio.ensure_future(self._wait(job, started))
            while not waiter.done():
                # A client that hangs up before its answer stops its request as a streaming one does.
                await asyncio.wait([waiter], timeout=1.0)
                if not waiter.done() and await request.is_disconnected():
                    waiter.cancel()
                    raise APIError(499, "client closed the request")
            waiter.result()
            for i, choice in enumerate(job.choices):
                if reasons[i] is not None or (not choice.new_ids and choice.finish_reason is None):
                    continue
                new, new_steps = choice.new_ids, choice.new_steps
                choice.new_ids, choice.new_steps = [], []
                choice.num_generated += len(new)
                ids[i] += new
                steps[i] += new_steps
                pieces[i].append(texts[i].push(new, final=choice.finish_reason is not None))
                reasons[i] = choice.finish_reason
                if texts[i].stopped and reasons[i] is None:
                    reasons[i] = "stop"
                    self.bridge.abort(job, i, "stop")
        choices = []
        for i in range(len(job.choices)):
            text = "".join(pieces[i])
            common = {"index": i, "finish_reason": reasons[i], "token_ids": ids[i], "token_steps": steps[i]}
            if chat:
                choices.append({**common, "message": {"role": "assistant", "content": text}})
            else:
                choices.append({**common, "text": text, "logprobs": None})
        return {
            "id": job.id,
            "object": "chat.completion" if chat else "text_completion",
            "created": int(time.time()),
            "model": self.settings.model_name,
            "choices": choices,
            "usage": self._usage(job),
        }

    @staticmethod
    def _usage(job: Job) -> dict:
        prompt = sum(len(c.prompt_ids) for c in job.choices)
        completion = sum(c.num_generated for c in job.choices)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}
