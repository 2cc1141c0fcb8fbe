"""Capture windows on demand, the HTTP side (the engine core's side is windows.py), off unless the server was
started with --enable-profiling (a window slows the server and writes files):

  POST /profile/start   {"tool": "steps" | "torch" | "nsys", "steps": N}   opens a window of exactly N decode steps
  POST /profile/stop                                              ends the open window early
  GET  /profile/status                                            the last window: state, steps done, files, pause
  GET  /profile/files/NAME                                        a closed window's file (steps.jsonl, trace.json.gz,
                                                                  trace.qdstrm)

The files travel over HTTP rather than through a folder the client reads: `roseprof live` is given a URL, and the
server may be another machine, a container or a pod whose disk the client never sees; the same route, the same
API key. A window's files are a few MB to tens of MB (gzipped), which the loopback moves in milliseconds.
Errors are one line (errors.py): 404 while profiling is off, 400 for bad input or a stop with no window open,
409 for a second window while one is open.
"""

from __future__ import annotations

import atexit
import json
import shutil
import tempfile
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import FileResponse

from roseinfer.names import WINDOW_TOOLS as TOOLS
from roseinfer.serve.bridge import EngineBridge
from roseinfer.serve.errors import APIError

OFF = "profiling is off: start the server with --enable-profiling"
USAGE = '{"tool": ' + " | ".join(f'"{t}"' for t in TOOLS) + ', "steps": N}'


def profile_folder(chosen: str | None) -> str:
    """--profile-dir, or a temporary folder removed when the server exits."""
    if chosen is not None:
        Path(chosen).mkdir(parents=True, exist_ok=True)
        return chosen
    folder = tempfile.mkdtemp(prefix="roseinfer-profile-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


def parse_start(body: bytes) -> tuple[str, int]:
    """(tool, steps) of a start request's body; APIError 400 in one line otherwise."""
    try:
        got = json.loads(body or b"{}")
    except ValueError:
        raise APIError(400, f"the body is not JSON: send {USAGE}") from None
    if not isinstance(got, dict):
        raise APIError(400, f"the body must be a JSON object: {USAGE}")
    tool, steps = got.get("tool"), got.get("steps")
    if tool not in TOOLS:
        raise APIError(400, f"tool must be one of {', '.join(TOOLS)}, got {tool!r}", param="tool")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps <= 0:
        raise APIError(400, f"steps must be an integer > 0, got {steps!r}", param="steps")
    return tool, steps


def install(app: FastAPI, bridge: EngineBridge, folder: str | None) -> None:
    """The /profile routes; `folder` None: profiling is off and each answers 404 in one line."""

    async def ask(*what) -> dict:
        if folder is None:
            raise APIError(404, OFF)
        answer = await bridge.query(("profile", *what, folder))
        if answer is None:
            raise APIError(503, "the engine cannot answer now (starting, stopped or failed)")
        if answer["code"] != 200:
            raise APIError(answer["code"], answer["message"])
        return answer

    @app.post("/profile/start")
    async def profile_start(request: Request):
        if folder is None:
            raise APIError(404, OFF)
        tool, steps = parse_start(await request.body())
        return (await ask("start", tool, steps))["window"]

    @app.post("/profile/stop")
    async def profile_stop():
        return (await ask("stop"))["window"]

    @app.get("/profile/status")
    async def profile_status():
        return {"window": (await ask("status"))["window"]}

    @app.get("/profile/files/{name}")
    async def profile_file(name: str):
        window = (await ask("status"))["window"]
        if window is None or name not in window["files"]:
            raise APIError(404, f"no file {name!r} in the last window (GET /profile/status lists them)")
        return FileResponse(Path(window["folder"]) / name, media_type="application/octet-stream")
