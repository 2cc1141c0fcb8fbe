"""`roseinfer serve MODEL [engine options] [--host 127.0.0.1] [--port 8000] ...`, also `python -m roseinfer.serve`.

The engine flags are the benchmarks' (roseinfer/bench/options.py defines them once): this parser takes every
option of that parser but the ones that only shape a benchmark run. Bad input (an unknown model, a port in use)
gets one line and exit code 2; an engine failure while serving exits 1; a SIGTERM or SIGINT drains (new requests
get 503, those in flight finish within --drain-timeout) and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib.util
import os
import resource
import socket
import sys

from roseinfer.bench import options as bench_options
from roseinfer.serve import slo_capture

PROG = "roseinfer serve"
# The benchmark parser's options that describe a benchmark run, not the engine.
BENCH_ONLY = {
    "help", "hf_model_id", "prompt", "prompt_repeats", "num_requests", "max_new_tokens", "submit_interval_ms",
    "mode", "pretok", "tokenize_workers", "warmup_runs", "repeat_runs", "compare_hf", "json", "no_stop_on_eos",
}  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=PROG, description="Serve a model over an OpenAI-compatible HTTP API.")
    p.add_argument(
        "model", metavar="MODEL", help="a checkpoint folder or a built-in name (gpt2, gpt2-tiny, ...)"
    )
    p.add_argument(
        "--served-model-name", default=None, help="the model's name in the API (default: MODEL's name)"
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)"
    )
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--api-key", default=None, help="Bearer key for every route but /health")
    p.add_argument(
        "--api-key-file",
        default=None,
        metavar="FILE",
        help="read the key from FILE (not seen in `ps`, unlike --api-key)",
    )
    p.add_argument(
        "--max-waiting", type=int, default=1024, help="requests queued beyond the batch; more get 503"
    )
    p.add_argument("--request-timeout", type=float, default=600.0, help="seconds a request may take in all")
    p.add_argument(
        "--drain-timeout", type=float, default=30.0, help="seconds SIGTERM waits for requests in flight"
    )
    p.add_argument(
        "--stall-timeout",
        type=float,
        default=60.0,
        help="seconds one engine step may run before /health fails",
    )
    p.add_argument("--max-body-bytes", type=int, default=1 << 20)
    p.add_argument("--max-headers", type=int, default=100)
    p.add_argument(
        "--chat-template", default=None, metavar="FILE", help="Jinja chat template for /v1/chat/completions"
    )
    p.add_argument(
        "--no-metrics", action="store_true", help="no /metrics and no metric bookkeeping in the engine loop"
    )
    p.add_argument(
        "--flight-recorder-steps",
        type=int,
        default=4096,
        metavar="N",
        help="keep the last N decode steps' records for GET /debug/steps (0: off)",
    )
    add_profiling_options(p)
    p.add_argument("--log-requests", action="store_true", help="log one line per request")
    p.add_argument(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="the HTTP side's event loop, as uvicorn's option (auto: uvloop when installed)",
    )
    p.add_argument(
        "--http",
        choices=("auto", "h11", "httptools"),
        default="auto",
        help="the HTTP/1.1 parser, as uvicorn's option (auto: httptools when installed)",
    )
    slo_capture.add_arguments(p)
    engine = p.add_argument_group("engine options (as the benchmarks take them)")
    for action in bench_options.build_parser("", "", "offline")._actions:
        if action.dest not in BENCH_ONLY:
            engine._group_actions.append(action)
            p._add_action(action)
    return p


def add_profiling_options(p: argparse.ArgumentParser) -> None:
    """Capture windows (roseinfer/serve/profiling.py): off unless asked, a window slows the server and writes."""
    p.add_argument(
        "--enable-profiling",
        action="store_true",
        help="serve POST /profile/start|stop and GET /profile/status: capture windows (steps, torch)",
    )
    p.add_argument(
        "--profile-dir",
        default=None,
        metavar="DIR",
        help="where windows write their files (the last window's kept; default: a temporary folder)",
    )


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = build_parser()
    args = p.parse_args(argv)
    if not 0 <= args.port <= 65535:  # a socket's bind raises OverflowError past it, not an OSError
        p.error("--port must be from 0 to 65535")
    for name in ("max_waiting", "max_body_bytes", "max_headers"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("request_timeout", "drain_timeout", "stall_timeout"):
        if not getattr(args, name) > 0:
            p.error(f"--{name.replace('_', '-')} must be > 0")
    args.device = args.device or bench_options.default_device()
    args.dtype = args.dtype or ("float16" if args.device.startswith("cuda") else "float32")
    return args


def _fail(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    from roseinfer.config import BUILTIN_MODELS
    from roseinfer.weights import resolve_model_config

    if args.model not in BUILTIN_MODELS and not os.path.isdir(args.model):
        return _fail(
            f"MODEL {args.model!r} is neither a checkpoint folder nor a built-in name ({', '.join(BUILTIN_MODELS)})"
        )
    try:
        model_cfg = resolve_model_config(args.model)
    except (ValueError, OSError, KeyError) as e:
        return _fail(str(e))
    if args.tensor_parallel_size > 1:
        from roseinfer.sharding import check_ranks

        try:
            check_ranks(args.model, args.tensor_parallel_size, args.device)
        except ValueError as e:
            return _fail(str(e))
    try:
        cfg = dataclasses.replace(
            bench_options.engine_config(args), flight_recorder_steps=args.flight_recorder_steps
        )
    except (ValueError, TypeError) as e:
        return _fail(str(e))
    if cfg.num_blocks is not None:
        # One request may hold the model's whole context; a pool that cannot would fail the engine, not the request.
        from roseinfer.block_manager import blocks_for

        need = blocks_for(model_cfg.n_positions, cfg.block_size) + 1
        if cfg.num_blocks < need:
            return _fail(
                f"--num-blocks {cfg.num_blocks} cannot hold one request of the model's {model_cfg.n_positions}-token "
                f"context ({need} blocks of {cfg.block_size}): give at least {need}, or leave it out"
            )
    try:
        args.slo_capture = slo_capture.spec_of(args)
    except ValueError as e:
        return _fail(str(e))
    if args.api_key_file is not None:
        try:
            with open(args.api_key_file, encoding="utf-8") as fh:
                args.api_key = fh.read().strip()
        except OSError as e:
            return _fail(f"--api-key-file: {e.strerror}: {args.api_key_file}")
        if not args.api_key:
            return _fail(f"--api-key-file: {args.api_key_file} is empty")
    chat_template = None
    if args.chat_template is not None:
        try:
            with open(args.chat_template, encoding="utf-8") as fh:
                chat_template = fh.read()
        except OSError as e:
            return _fail(f"--chat-template: {e.strerror}: {args.chat_template}")
    try:
        sock = socket.create_server((args.host, args.port), reuse_port=False)
    except OSError as e:
        return _fail(f"cannot listen on {args.host}:{args.port}: {e.strerror or e}")
    _raise_open_files_limit()
    from roseinfer.serve.server import serve

    loop_factory = _loop_factory(args.loop)
    if loop_factory is None:
        return _fail("--loop uvloop: uvloop is not installed")
    if args.http == "httptools" and importlib.util.find_spec("httptools") is None:
        return _fail("--http httptools: httptools is not installed")
    return _run(serve(args, cfg, model_cfg, sock, chat_template), loop_factory)


def _run(coro, loop_factory):
    """asyncio.run on the loop --loop chose (asyncio.run takes no loop factory before Python 3.12)."""
    loop = loop_factory()
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def _loop_factory(choice: str):
    """The event loop's constructor for --loop (None: uvloop asked for and missing)."""
    if choice != "asyncio":
        try:
            import uvloop

            return uvloop.new_event_loop
        except ImportError:
            if choice == "uvloop":
                return None
    return asyncio.new_event_loop


def _raise_open_files_limit() -> None:
    """Each connection is a file descriptor: a thousand idle clients must not exhaust the soft limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = 65536 if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):  # a limit the system refuses: the soft one stays
            pass


def roseinfer_main(argv: list[str] | None = None) -> int:
    """The `roseinfer` command: `roseinfer serve ...` (the one subcommand so far)."""
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print("usage: roseinfer serve MODEL [options]   (roseinfer serve --help for the options)")
        return 0 if argv else 2
    if argv[0] != "serve":
        print(f"roseinfer: error: unknown command {argv[0]!r} (the commands: serve)", file=sys.stderr)
        return 2
    return main(argv[1:])
