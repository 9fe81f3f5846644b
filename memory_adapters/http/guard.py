"""Loopback is not an identity (DESIGN.md, "Local defaults"): web pages in the operator's
browser are loopback callers too."""

from __future__ import annotations

from aiohttp import web

from memplane_core.local_trust import (
    HOST_REFUSED_STATUS,
    cross_site,
    is_json_content_type,
    is_loopback_host,
    is_loopback_ip,
    relayed,
)

from .errors import json_error

BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def local_guard(tokenless: bool):
    """Refused before auth or parsing: a request a browser made for another site (403), a
    tokenless service reached under a name that is not loopback's (421: DNS rebinding), and a
    body that is not `application/json` (415: a cross-site form or `text/plain` fetch needs no
    CORS preflight)."""

    @web.middleware
    async def middleware(request: web.Request, handler):
        host = request.headers.get("Host")
        if tokenless and is_loopback_ip(request.remote) and not is_loopback_host(host):
            return json_error(HOST_REFUSED_STATUS, "this service answers loopback callers only under a loopback "
                                                   "name (localhost, 127.0.0.1, [::1]); set a token to serve others",
                              "Host")
        via = relayed(request.headers) if tokenless and is_loopback_ip(request.remote) else None
        if via is not None:  # a reverse proxy on this machine relays for anyone: loopback proves nothing
            return json_error(HOST_REFUSED_STATUS, f"this service answers loopback callers only, and this request "
                                                   f"was relayed ({via}); set a token to serve others", via)
        why = cross_site(request.headers.get("Origin"), request.headers.get("Sec-Fetch-Site"), host)
        if why is not None:
            return json_error(403, f"cross-site browser requests are refused ({why})", "Origin")
        unrouted = request.match_info.http_exception
        if unrouted is not None:  # before the body's type: a PUT to /health is 405, not 415
            return _unrouted(request, unrouted)
        if request.method in BODY_METHODS and not is_json_content_type(request.headers.get("Content-Type")):
            return json_error(415, "the body must be sent as Content-Type: application/json", "Content-Type")
        return await handler(request)

    return middleware


def _unrouted(request: web.Request, exc: web.HTTPException) -> web.Response:
    """aiohttp's 404/405 in the service's one error shape (its own are text/plain), `Allow` kept."""
    allow = exc.headers.get("Allow")
    if exc.status == 405 and allow is not None:
        return json_error(405, f"this route does not take {request.method}; it takes {allow}",
                          headers={"Allow": allow})
    return json_error(exc.status, "no such route on this memory service" if exc.status == 404 else exc.reason)
