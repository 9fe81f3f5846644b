"""Request bodies and query strings parsed into typed models: 400 naming the field, 403 when a
per-agent token names another agent."""

from __future__ import annotations

from typing import Any, TypeVar

import orjson
from aiohttp import web
from aiohttp.http_exceptions import ContentEncodingError
from aiohttp.web_protocol import RequestPayloadError
from pydantic import BaseModel, ValidationError

from memplane_core.body_codings import refusal_text, stacked_coding
from memplane_core.slow_clients import BodyTimedOut, read_in_time

from .auth import CALLER_AGENT
from .errors import first_error, refusal

Model = TypeVar("Model", bound=BaseModel)


async def parse(request: web.Request, model: type[Model]) -> Model:
    """The JSON body as `model`."""
    try:
        doc = orjson.loads(await read_body(request))
    except orjson.JSONDecodeError:
        raise refusal(web.HTTPBadRequest, "body is not valid JSON") from None
    return _validated(request, model, doc)


async def read_body(request: web.Request) -> bytes:
    """The body, decoded. One that cannot be read as sent — a `Content-Encoding` it does not match
    (gzip that is not gzip), or cut short by a caller that hung up — is the caller's 400, not a 500;
    one that does not arrive in time (MEMPLANE_BODY_TIMEOUT_S) its 408, and the connection closed."""
    if (stacked := stacked_coding(request.headers)) is not None:
        raise refusal(web.HTTPUnsupportedMediaType, refusal_text(stacked), "Content-Encoding")
    try:
        return await read_in_time(request)
    except (ContentEncodingError, RequestPayloadError, ConnectionResetError):
        raise refusal(web.HTTPBadRequest, "the body could not be read as sent (its Content-Encoding, "
                                          "or cut short)") from None
    except BodyTimedOut as exc:
        raise refusal(web.HTTPRequestTimeout, str(exc)) from None


def parse_query(request: web.Request, model: type[Model]) -> Model:
    """The query string as `model` (a parameter given twice: the first counts)."""
    return _validated(request, model, {k: request.query[k] for k in request.query})


def _validated(request: web.Request, model: type[Model], doc: Any) -> Model:
    try:
        parsed = model.model_validate(doc)
    except ValidationError as exc:
        field, text = first_error(exc)
        raise refusal(web.HTTPBadRequest, text, field) from None
    caller = request.get(CALLER_AGENT)
    if caller is not None and getattr(parsed, "agent_id", caller) != caller:
        raise refusal(web.HTTPForbidden, "agent_id does not match the token", "agent_id")
    return parsed
