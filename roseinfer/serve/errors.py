"""Errors in the OpenAI shape, `{"error": {"message", "type", "param", "code"}}`, for every client mistake.

FastAPI answers a body that fails validation with 422 and its own shape; OpenAI and vLLM answer 400, so the
handlers here turn validation errors, unknown routes and our own checks into that shape. An unexpected
exception is a 500 with one line, never a traceback.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

log = logging.getLogger("roseinfer.serve")

_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    405: "invalid_request_error",
    408: "timeout_error",
    413: "invalid_request_error",
    431: "invalid_request_error",
    500: "internal_error",
    503: "service_unavailable",
}


class APIError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.headers = headers


def error_body(status: int, message: str, param: str | None = None, code: str | None = None) -> dict:
    return {"error": {"message": message, "type": _TYPES.get(status, "error"), "param": param, "code": code}}


def error_response(
    status: int,
    message: str,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    return JSONResponse(error_body(status, message, param, code), status_code=status, headers=headers)


def _validation_message(exc: RequestValidationError) -> tuple[str, str | None]:
    """The first problem in one line, and the field it is about (OpenAI's `param`)."""
    errors = exc.errors()
    if not errors:
        return "invalid request body", None
    first = errors[0]
    if first.get("type") == "json_invalid":
        return f"the body is not valid JSON: {first.get('ctx', {}).get('error', first.get('msg'))}", None
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    # A union (prompt) reports each branch it tried; the field name and the first reason are enough.
    field = loc[0] if loc else None
    if first.get("type") == "missing" and not loc:
        return "the request needs a JSON body", None
    if first.get("type") == "extra_forbidden":
        return f"unknown field {field!r}: this server does not implement it", field
    where = ".".join(p for p in loc if not p.startswith(("list[", "str", "int", "function-"))) or "body"
    return f"{where}: {first.get('msg', 'invalid value')}", field


def install(app: FastAPI) -> None:
    @app.exception_handler(APIError)
    async def _api_error(request: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, exc.param, exc.code, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc)
        return error_response(400, message, param)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return error_response(404, f"no route {request.method} {request.url.path}")
        return error_response(exc.status_code, str(exc.detail), headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        line = f"{type(exc).__name__}: {exc}".splitlines()[0]
        log.error("roseinfer serve: %s %s failed: %s", request.method, request.url.path, line)
        return error_response(500, f"internal error: {line}")
