"""One error shape for every adapter route: `{"error": {"message", "field"}}`, the status a
client can act on, and `Retry-After` where waiting helps."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web
from pydantic import ValidationError


def json_response(doc: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(doc), content_type="application/json")


def error_doc(message: str, field: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, **({"field": field} if field else {})}}


def json_error(status: int, message: str, field: str | None = None, *,
               retry_after_s: int | None = None, headers: dict[str, str] | None = None) -> web.Response:
    headers = {**(headers or {}), **({"Retry-After": str(retry_after_s)} if retry_after_s is not None else {})}
    return web.Response(status=status, body=orjson.dumps(error_doc(message, field)),
                        content_type="application/json", headers=headers)


def refusal(error: type[web.HTTPException], message: str, field: str | None = None) -> web.HTTPException:
    """The same shape, raised from deep in a handler (aiohttp answers it)."""
    return error(text=orjson.dumps(error_doc(message, field)).decode(), content_type="application/json")


def first_error(exc: ValidationError, prefix: str = "") -> tuple[str, str]:
    """The field path and message of a validation error's first problem."""
    err = exc.errors()[0]
    field = prefix + (".".join(str(p) for p in err["loc"]) or "<root>")
    return field, f"{field}: {err['msg']}"
