"""aiohttp's failures, turned into memplane's own errors in one place.

A call to another server — the provider, a memory service — can fail before any HTTP answer in
two ways that matter to callers: it ran out of time, or the connection failed. Everything that
talks to another server runs its I/O inside `transport_errors()` and catches `TransportError`
(the way httpx maps httpcore's exceptions once); provider calls use `provider_errors()`, which
turns the same failures into the agent's 504/502. The caller's own body is read through
`read_request_body()`, which turns a body aiohttp cannot decode into the caller's 400.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp
from aiohttp import web
from aiohttp.http_exceptions import ContentEncodingError
from aiohttp.web_protocol import RequestPayloadError

from .errors import ProxyError


class TransportError(Exception):
    """No usable HTTP answer: `timed_out`, or the connection failed (`name` says how)."""

    def __init__(self, cause: BaseException) -> None:
        self.name = type(cause).__name__
        self.timed_out = isinstance(cause, TimeoutError)
        super().__init__(self.name)


@contextmanager
def transport_errors() -> Iterator[None]:
    try:
        yield
    except (aiohttp.ClientError, TimeoutError, OSError) as exc:
        raise TransportError(exc) from None


@contextmanager
def provider_errors(*, answering: bool = False) -> Iterator[None]:
    """A failed provider call as the agent sees it: 504 when it ran out of time, else 502.
    `answering`: the provider had started its answer (the status line came) and then failed."""
    try:
        with transport_errors():
            yield
    except TransportError as exc:
        if exc.timed_out:
            what = "did not finish its answer" if answering else "did not answer"
            raise ProxyError(504, f"The upstream provider {what} in time.", code="upstream_timeout") from None
        what = "broke off its answer" if answering else "is unreachable"
        raise ProxyError(502, f"The upstream provider {what} ({exc.name}).", code="upstream_unreachable") from None


async def read_request_body(request: web.Request) -> bytes:
    """The caller's body, decoded. A `Content-Encoding` the body does not match (gzip that is not
    gzip) or a body cut short is the caller's mistake: 400 in its format, not an internal error."""
    try:
        return await request.read()
    except (ContentEncodingError, RequestPayloadError) as exc:
        detail = str(exc).strip().splitlines()[-1].strip() if str(exc).strip() else type(exc).__name__
        raise ProxyError(400, f"The request body could not be read ({detail}).", code="invalid_body") from None
