"""What the server holds every request to before a route sees it: header count, body size, the API key; and the
server's settings that the routes and these limits share."""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass

from roseinfer.serve.errors import error_body


@dataclass
class ServeSettings:
    model_name: str
    vocab_size: int
    max_model_len: int  # the model's positions: prompt plus generated tokens
    api_key: str | None = None
    max_waiting: int = 1024
    request_timeout_s: float = 600.0
    max_body_bytes: int = 1 << 20
    max_headers: int = 100
    chat_template: str | None = None  # Jinja source
    log_requests: bool = False
    stall_s: float = 60.0  # /health fails while one engine step has run longer than this
    profile_dir: str | None = None  # capture windows' folder (--enable-profiling); None: /profile answers 404


class Limits:
    """Pure ASGI middleware: header count, body size, and the API key (every route but /health)."""

    def __init__(self, app, settings: ServeSettings) -> None:
        self.app = app
        self.settings = settings
        self.expected = f"Bearer {settings.api_key}".encode() if settings.api_key else None

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        s = self.settings
        headers = scope["headers"]
        if len(headers) > s.max_headers:
            return await _send_error(send, 431, f"too many headers ({len(headers)} > {s.max_headers})")
        if self.expected is not None and scope["path"] != "/health":
            given = next((v for k, v in headers if k == b"authorization"), b"")
            if not hmac.compare_digest(given, self.expected):
                return await _send_error(
                    send,
                    401,
                    "missing or wrong API key (Authorization: Bearer KEY)",
                    [(b"www-authenticate", b"Bearer")],
                )
        length = next((v for k, v in headers if k == b"content-length"), None)
        if length is not None and (not length.isdigit() or int(length) > s.max_body_bytes):
            return await _send_error(send, 413, f"request body over {s.max_body_bytes} bytes")
        # Read the body here, up to the limit, so an oversized one is refused with 413 before any parsing (a
        # chunked body has no Content-Length to judge by), then hand it on.
        body, more = [], True
        received = 0
        while more and scope["method"] in ("POST", "PUT", "PATCH"):
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            received += len(message.get("body", b""))
            if received > s.max_body_bytes:
                return await _send_error(send, 413, f"request body over {s.max_body_bytes} bytes")
            body.append(message.get("body", b""))
            more = message.get("more_body", False)
        if not body:
            return await self.app(scope, receive, send)
        pending = [{"type": "http.request", "body": b"".join(body), "more_body": False}]

        async def replay():
            return pending.pop() if pending else await receive()

        return await self.app(scope, replay, send)


async def _send_error(send, status: int, message: str, extra: list | None = None) -> None:
    body = json.dumps(error_body(status, message)).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *(extra or []),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
