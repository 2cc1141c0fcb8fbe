"""Runs the app on uvicorn, the engine core in a process of its own (engine_core.py), and owns the process's lifetime: the ready line, SIGTERM
and SIGINT (drain, then exit 0), an engine failure (exit 1)."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import sys

import uvicorn

from roseinfer.config import EngineConfig, ModelConfig
from roseinfer.serve.app import create_app
from roseinfer.serve.bridge import FAILED, READY, EngineBridge
from roseinfer.serve.limits import ServeSettings
from roseinfer.serve.metrics import Collector
from roseinfer.serve.profiling import profile_folder

log = logging.getLogger("roseinfer.serve")
PROG = "roseinfer serve"


class Server(uvicorn.Server):
    """uvicorn's server, but a first SIGTERM/SIGINT drains instead of closing the listener at once (new requests
    then get an OpenAI-shaped 503, not a refused connection); a second one stops at once."""

    def __init__(self, config: uvicorn.Config, on_signal) -> None:
        super().__init__(config)
        self.on_signal = on_signal
        self.signalled = False

    def handle_exit(self, sig: int, frame) -> None:
        # Not uvicorn's: it would re-raise the signal after shutting down, and the process would die of it.
        if self.signalled:
            self.should_exit = self.force_exit = True
            return
        self.signalled = True
        self.on_signal()


def _model_name(args) -> str:
    if args.served_model_name:
        return args.served_model_name
    return os.path.basename(os.path.normpath(args.model)) if os.path.isdir(args.model) else args.model


async def serve(
    args, cfg: EngineConfig, model_cfg: ModelConfig, sock: socket.socket, chat_template: str | None
) -> int:
    from roseinfer.tokenizer import load_tokenizer

    loop = asyncio.get_running_loop()
    name = _model_name(args)
    bridge = EngineBridge(args.model, cfg, not args.no_metrics, loop, slo=getattr(args, "slo_capture", None))
    settings = ServeSettings(
        model_name=name,
        vocab_size=model_cfg.vocab_size,
        max_model_len=model_cfg.n_positions,
        api_key=args.api_key,
        max_waiting=args.max_waiting,
        request_timeout_s=args.request_timeout,
        max_body_bytes=args.max_body_bytes,
        max_headers=args.max_headers,
        chat_template=chat_template,
        log_requests=args.log_requests,
        stall_s=args.stall_timeout,
        profile_dir=profile_folder(args.profile_dir) if args.enable_profiling else None,
    )
    collector = None if args.no_metrics else Collector(name)
    app = create_app(bridge, load_tokenizer(args.model), settings, collector)
    config = uvicorn.Config(
        app,
        log_level="warning",
        access_log=False,
        # No startup or shutdown hooks: with uvicorn's lifespan task on, a SIGTERM printed its cancellation's
        # traceback on the way out.
        lifespan="off",
        http=args.http,
        timeout_keep_alive=5,
        timeout_graceful_shutdown=5,
        h11_max_incomplete_event_size=16 * 1024,  # request line and headers, in bytes
    )
    exit_code = 0
    draining: asyncio.Task | None = None

    async def drain() -> None:
        """Stop admitting (503), let what is in flight finish within --drain-timeout, then stop."""
        bridge.drain()
        deadline = loop.time() + args.drain_timeout
        while bridge.jobs and loop.time() < deadline and bridge.state != FAILED:
            await asyncio.sleep(0.05)
        bridge.stop()
        server.should_exit = True

    def on_signal() -> None:
        nonlocal draining
        if draining is None:
            draining = loop.create_task(drain())

    server = Server(config, lambda: loop.call_soon_threadsafe(on_signal))

    async def watch_engine() -> None:
        nonlocal exit_code
        await bridge.ready.wait()
        while not server.started and not server.should_exit:
            await asyncio.sleep(0.01)
        if bridge.state == READY:
            host, port = sock.getsockname()[:2]
            host = f"[{host}]" if ":" in host else host
            print(f"{PROG}: ready at http://{host}:{port} (model {name})", flush=True)
        await bridge.finished.wait()
        if bridge.state == FAILED:
            print(f"{PROG}: error: {bridge.failure}", file=sys.stderr, flush=True)
            exit_code = 1
            # Open streams have their error event; give their writers a moment, then stop.
            await asyncio.sleep(0.2)
            server.should_exit = True

    bridge.start()
    watcher = loop.create_task(watch_engine())
    try:
        await server.serve(sockets=[sock])
    finally:
        bridge.stop()
        # The core finishes its aborts and stops its ranks (tensor parallelism) before it exits.
        await bridge.wait_stopped(timeout_s=30)
        await asyncio.wait([watcher], timeout=5)
    if bridge.state == FAILED:
        # 2: the engine could not be built from these options (as for any bad command line); 1: it failed serving.
        exit_code = 1 if bridge.built else 2
    return exit_code
