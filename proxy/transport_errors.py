"""aiohttp's failures, turned into memplane's own errors in one place.

A call to another server — the provider, a memory service — can fail before any HTTP answer in
two ways that matter to callers: it ran out of time, or the connection failed. Everything that
talks to another server runs its I/O inside `transport_errors()` and catches `TransportError`
(the way httpx maps httpcore's exceptions once); provider calls use `provider_errors()`, which
turns the same failures into the agent's 504/502. The caller's own body is read through
`read_request_body()` (or `read_request_form()`), which turns a body aiohttp cannot decode, or
one cut short, into the caller's 400, and one that does not arrive in time (MEMPLANE_BODY_TIMEOUT_S,
memplane_core/slow_clients.py) into its 408.
"""

from __future__ import annotations

from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.http_exceptions import ContentEncodingError
from aiohttp.web_protocol import RequestPayloadError

from memplane_core.body_codings import refusal_text, stacked_coding
from memplane_core.slow_clients import BodyTimedOut, read_in_time

from .errors import ProxyError


class TransportError(Exception):
    """No usable HTTP answer: `timed_out`, or the connection failed (`name` says how)."""

    def __init__(self, cause: BaseException) -> None:
        self.name = type(cause).__name__
        self.timed_out = isinstance(cause, TimeoutError)
        super().__init__(self.name)


LIBRARY_FAILURES = (aiohttp.ClientError, TimeoutError, OSError)  # what an exchange may raise


class transport_errors:  # noqa: N801 - used as `with transport_errors():`, like the function it was
    """`with transport_errors():` — a library failure (aiohttp, a timeout, an OS error) becomes one
    TransportError. A class, not a generator-based context manager: it wraps every exchange."""

    __slots__ = ()

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        if isinstance(exc, LIBRARY_FAILURES):
            raise TransportError(exc) from None
        return False


class provider_errors:  # noqa: N801
    """A failed provider call as the agent sees it: 504 when it ran out of time, else 502.
    `answering`: the provider had started its answer (the status line came) and then failed."""

    __slots__ = ("answering",)

    def __init__(self, *, answering: bool = False) -> None:
        self.answering = answering

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: Any, exc: Any, tb: Any) -> bool:
        if not isinstance(exc, (*LIBRARY_FAILURES, TransportError)):
            return False
        failure = exc if isinstance(exc, TransportError) else TransportError(exc)
        if failure.timed_out:
            what = "did not finish its answer" if self.answering else "did not answer"
            raise ProxyError(504, f"The upstream provider {what} in time.", code="upstream_timeout") from None
        what = "broke off its answer" if self.answering else "is unreachable"
        raise ProxyError(502, f"The upstream provider {what} ({failure.name}).",
                         code="upstream_unreachable") from None


# What reading the caller's body raises when the body is the caller's mistake: a `Content-Encoding`
# it does not match (gzip that is not gzip), or a body cut short — the caller hung up before sending
# the length it announced (ConnectionResetError "Connection lost").
UNREADABLE_BODY = (ContentEncodingError, RequestPayloadError, ConnectionResetError)


async def read_request_body(request: web.Request) -> bytes:
    """The caller's body, decoded; one it cannot be read as sent is the caller's 400 in its format,
    not an internal error (nor an `unhandled_error` log line for a client that went away)."""
    return await _read(request, request.read)


async def read_request_form(request: web.Request) -> Any:
    """The caller's form (the inspector's posts), read like `read_request_body`."""
    return await _read(request, request.post)


async def _read(request: web.Request, read: Any) -> Any:
    """`read()` of the caller's body with its failures as the caller's own errors: a stacked coding
    415, a body that cannot be read as sent 400, one overdue 408."""
    if (stacked := stacked_coding(request.headers)) is not None:
        raise ProxyError(415, refusal_text(stacked), code="unsupported_content_encoding")
    try:
        return await read_in_time(request, read)
    except UNREADABLE_BODY as exc:
        raise _unreadable(exc) from None
    except BodyTimedOut as exc:
        raise _overdue(exc) from None


def _unreadable(exc: BaseException) -> ProxyError:
    detail = str(exc).strip().splitlines()[-1].strip() if str(exc).strip() else type(exc).__name__
    return ProxyError(400, f"The request body could not be read ({detail}).", code="invalid_body")


def _overdue(exc: BodyTimedOut) -> ProxyError:
    """The caller's 408; the connection is closed once it is answered (memplane_cli/runner.py)."""
    return ProxyError(408, str(exc), code="request_timeout")
