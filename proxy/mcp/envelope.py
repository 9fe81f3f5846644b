"""The JSON-RPC envelope of a POST to `/mcp`, checked before the `mcp` package reads it.

The package validates a message against the union of its message models, and what does not fit
becomes a `-32602 Invalid params` answer carrying pydantic's dump, with `id: null` even when the
request's id was plain to see; and a request whose id is of a type MCP does not allow (null, an
object, a float, a boolean) was taken for a notification: `202 Accepted`, no answer, so its client
waits for ever. JSON-RPC 2.0 (section 5.1) and MCP's base protocol say otherwise, and a client reads
the code to know whose mistake it was:

* not JSON: `-32700 Parse error`;
* not a request, notification or response (a scalar, a batch — MCP dropped batching in 2025-06-18 —
  `jsonrpc` other than "2.0", a method that is not a string, an id that is neither a string nor an
  integer): `-32600 Invalid Request`, `id: null` (the id could not be read);
* `params` that is not an object: `-32602 Invalid params`, with the request's id;
* over MAX_BODY_BYTES: 413 with `-32600` (the package answered its own 413 as bare text).

Everything that passes goes to the package as sent.
"""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

MAX_BODY_BYTES = 1024 * 1024  # one message; the session manager is given it too (server.py)

PARSE_ERROR, INVALID_REQUEST, INVALID_PARAMS = -32700, -32600, -32602


def _answer(code: int, message: str, ident: Any = None, status: int = 400) -> web.Response:
    return web.json_response({"jsonrpc": "2.0", "id": ident, "error": {"code": code, "message": message}},
                             status=status)


def _valid_id(ident: Any) -> bool:
    """MCP: "Requests MUST include a string or integer ID"; "the ID MUST NOT be null"."""
    return isinstance(ident, (str, int)) and not isinstance(ident, bool)


def _error_object(error: Any) -> bool:
    """JSON-RPC 2.0 section 5.1: an error object has an integer `code` and a string `message`."""
    return isinstance(error, dict) and _valid_id(error.get("code")) and not isinstance(error.get("code"), str) \
        and isinstance(error.get("message"), str)


def envelope_refusal(body: bytes) -> web.Response | None:
    """The JSON-RPC error for a body that is no message MCP takes, or None to hand it on."""
    if len(body) > MAX_BODY_BYTES:  # the package's own 413 is a bare "Request body too large", no JSON
        return _answer(INVALID_REQUEST, f"Invalid Request: the message is over {MAX_BODY_BYTES} bytes.", status=413)
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        return _answer(PARSE_ERROR, f"Parse error: {exc.msg}.")
    if isinstance(message, list):
        return _answer(INVALID_REQUEST, "Invalid Request: JSON-RPC batches are not supported (MCP 2025-06-18); "
                                        "send one message per POST.")
    if not isinstance(message, dict):
        return _answer(INVALID_REQUEST, "Invalid Request: a JSON-RPC message is a JSON object.")
    if message.get("jsonrpc") != "2.0":
        return _answer(INVALID_REQUEST, 'Invalid Request: "jsonrpc" must be exactly "2.0".')
    if "method" not in message:
        if "id" in message and (isinstance(message.get("result"), dict) or _error_object(message.get("error"))):
            return None  # a response to a request of the server's
        return _answer(INVALID_REQUEST, 'Invalid Request: a message has a "method", or an "id" with a "result" '
                                        'object or an "error" object.')
    if not isinstance(message["method"], str):
        return _answer(INVALID_REQUEST, 'Invalid Request: "method" must be a string.')
    if "id" in message and not _valid_id(message["id"]):
        return _answer(INVALID_REQUEST, 'Invalid Request: "id" must be a string or an integer.')
    if "params" in message and not isinstance(message["params"], dict):
        return _answer(INVALID_PARAMS, 'Invalid params: "params" must be an object.', message.get("id"))
    return None
