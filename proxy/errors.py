"""Error bodies in each provider's own shape, so SDKs raise their normal exception types."""

from __future__ import annotations

from enum import Enum

import orjson
from aiohttp import web


class Dialect(str, Enum):
    OPENAI = "openai"
    ANTHROPIC = "anthropic"


_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "invalid_request_error",  # the caller's body did not arrive in time (memplane_core/slow_clients.py)
    413: "invalid_request_error",
    415: "invalid_request_error",
    429: "rate_limit_error",
    502: "api_error",
    503: "api_error",
    504: "api_error",
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "invalid_request_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    502: "api_error",
    503: "overloaded_error",
    504: "api_error",
}


class ProxyError(Exception):
    """Raised anywhere in request handling; rendered in the caller's dialect."""

    def __init__(self, status: int, message: str, *, code: str | None = None,
                 param: str | None = None, headers: dict[str, str] | None = None,
                 details: dict[str, object] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.param = param
        self.headers = headers or {}
        self.details = details  # Anthropic's machine-readable `error.details` (e.g. thread_not_found)


def error_body(dialect: Dialect, status: int, message: str, *, code: str | None = None,
               param: str | None = None, details: dict[str, object] | None = None) -> bytes:
    if dialect is Dialect.ANTHROPIC:
        kind = _ANTHROPIC_TYPES.get(status, "api_error")
        error: dict[str, object] = {"type": kind, "message": message}
        if details:
            error["details"] = details
        return orjson.dumps({"type": "error", "error": error})
    kind = _OPENAI_TYPES.get(status, "api_error")
    return orjson.dumps(
        {"error": {"message": message, "type": kind, "param": param, "code": code}}
    )


BROKE_OFF = "the provider's stream broke off before its end; the answer is incomplete"


def stream_error_event(fmt_name: str, message: str = BROKE_OFF) -> bytes:
    """The SSE event a provider itself sends when a stream fails midway, so that the agent's SDK
    raises instead of taking a cut-off answer for a finished one. Anthropic: an `error` event
    ("Error events", streaming docs; the SDK raises APIStatusError); Chat Completions: a chunk
    holding `error` (the SDK raises APIError); Responses: the `error` event of its stream."""
    if fmt_name == "anthropic":
        return b"event: error\ndata: " + error_body(Dialect.ANTHROPIC, 502, message) + b"\n\n"
    if fmt_name == "responses":
        return b"event: error\ndata: " + orjson.dumps(
            {"type": "error", "code": "upstream_broke_off", "message": message, "param": None}) + b"\n\n"
    return b"data: " + error_body(Dialect.OPENAI, 502, message, code="upstream_broke_off") + b"\n\n"


def error_response(dialect: Dialect, err: ProxyError) -> web.Response:
    return web.Response(
        status=err.status,
        body=error_body(dialect, err.status, err.message, code=err.code, param=err.param, details=err.details),
        content_type="application/json",
        headers=err.headers,
    )

