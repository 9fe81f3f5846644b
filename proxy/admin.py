"""Who may open the operator routes (`/metrics`, `/memplane/*`): the admin token when one is set
(as a bearer header, or the inspector's login cookie), else loopback callers only. Agent tokens
never open them."""

from __future__ import annotations

import hashlib
import hmac

from aiohttp import web

from .config import ProxySettings
from .errors import ProxyError

COOKIE = "memplane_admin"


def session_value(admin_token: str) -> str:
    """What the login cookie holds: derived from the token, never the token itself."""
    return hmac.new(admin_token.encode(), b"memplane inspector session", hashlib.sha256).hexdigest()


def token_matches(given: str, admin_token: str) -> bool:
    """A constant-time comparison of a presented token with the admin token."""
    return bool(given) and hmac.compare_digest(given.encode(), admin_token.encode())


def is_admin(request: web.Request, settings: ProxySettings) -> bool:
    if settings.admin_token:
        header = request.headers.get("Authorization", "")
        if token_matches(header[7:].strip() if header[:7].lower() == "bearer " else "", settings.admin_token):
            return True
        cookie = request.cookies.get(COOKIE, "")
        return bool(cookie) and hmac.compare_digest(cookie, session_value(settings.admin_token))
    remote = request.remote or ""
    return remote in ("127.0.0.1", "::1") or remote.startswith("127.")


def admin_only(request: web.Request, settings: ProxySettings) -> None:
    if not is_admin(request, settings):
        if settings.admin_token:
            raise ProxyError(401, "This route needs the admin token (MEMPLANE_ADMIN_TOKEN).", code="invalid_api_key")
        raise ProxyError(403, "Operator routes answer only on loopback unless MEMPLANE_ADMIN_TOKEN is set.",
                         code="forbidden")
