"""One aiohttp request handed to an ASGI application, and its answer handed back.

Why not a second server on another port: MCP clients are told one URL (the proxy's), and the
proxy's limits, Origin checks and agent authentication run before anything reaches the ASGI side.
The body is read by aiohttp first (bounded by the proxy's `client_max_size`; the endpoint reads it
with `read_request_body`), so the ASGI app gets it whole in one `http.request` message; what the
app sends is streamed back as it comes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from aiohttp import web
from multidict import CIMultiDict

Message = MutableMapping[str, Any]
ASGIApp = Callable[[Message, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]], Awaitable[None]]


def _scope(request: web.Request, extra: dict[str, Any]) -> dict[str, Any]:
    host, port = (request.transport.get_extra_info("sockname") or ("127.0.0.1", 0))[:2] \
        if request.transport is not None else ("127.0.0.1", 0)
    return {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method, "scheme": request.scheme, "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("latin-1", "replace"),
        "query_string": request.query_string.encode("latin-1", "replace"), "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.raw_headers],
        "client": (request.remote or "", 0), "server": (host, port), "state": {}, **extra,
    }


async def serve_asgi(app: ASGIApp, request: web.Request, extra_scope: dict[str, Any],
                     body: bytes) -> web.StreamResponse:
    """Run `app` for `request`, whose `body` aiohttp has read; `extra_scope` carries what the aiohttp
    side already established."""
    delivered = False
    gone = asyncio.Event()  # set when the answer is complete: a waiting `receive` then hears disconnect

    async def receive() -> Message:
        nonlocal delivered
        if not delivered:
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        return {"type": "http.disconnect"}

    response: web.StreamResponse | None = None

    async def send(message: Message) -> None:
        nonlocal response
        if message["type"] == "http.response.start":
            headers = CIMultiDict((k.decode("latin-1"), v.decode("latin-1")) for k, v in message.get("headers", ()))
            response = web.StreamResponse(status=message["status"], headers=headers)
            if "content-length" in headers:
                response.content_length = int(headers["content-length"])
            await response.prepare(request)
        elif message["type"] == "http.response.body" and response is not None:
            chunk = message.get("body", b"")
            if chunk:
                await response.write(chunk)
            if not message.get("more_body", False):
                await response.write_eof()
                gone.set()

    try:
        await app(_scope(request, extra_scope), receive, send)
    finally:
        gone.set()
    if response is None:  # the app answered nothing: never a hang, never a traceback
        return web.json_response({"jsonrpc": "2.0", "id": None,
                                  "error": {"code": -32603, "message": "Internal error"}}, status=500)
    return response
