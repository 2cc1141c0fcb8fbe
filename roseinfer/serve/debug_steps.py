"""GET /debug/steps?last=N: the flight recorder's records (roseinfer/flight_recorder.py) as the step log's JSON
lines, meta record first, so that the body saved to a file is a step log (`roseprof import FILE` makes a run of
it; `roseprof live` fetches it). Asked of the engine core between two steps, as /metrics is."""

from __future__ import annotations

import msgspec
from fastapi.responses import Response

from roseinfer.serve.bridge import EngineBridge
from roseinfer.serve.errors import APIError

_encode = msgspec.json.Encoder().encode


async def debug_steps(bridge: EngineBridge, last: str | None) -> Response:
    if not bridge.cfg.flight_recorder_steps:
        raise APIError(404, "the flight recorder is off (roseinfer serve --flight-recorder-steps 0)")
    n = None
    if last is not None:
        try:
            n = int(last)
        except ValueError:
            n = -1
        if n < 0:
            raise APIError(400, f"last must be an integer >= 0, got {last!r}", param="last")
    records = await bridge.query(("steps", n))
    if records is None:
        raise APIError(503, "the engine cannot answer now (starting, stopped or failed)")
    body = b"\n".join(_encode(r) for r in records) + b"\n"
    return Response(body, media_type="application/x-ndjson")
