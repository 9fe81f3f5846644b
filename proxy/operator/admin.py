"""Who may open the operator routes (`/metrics`, `/memplane/*`): the admin token when one is set
(as a bearer header, or an inspector login session), else loopback callers only, and only under
a loopback name (DESIGN.md, "Local defaults"). Agent tokens never open them.

The gate lives on the app (`OPERATOR_GATE`); it holds the login sessions, the throttle on failed
logins and bearer guesses, and the key that signs the inspector's CSRF tokens.
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass

from aiohttp import web

from memplane_core.local_trust import HOST_REFUSED_STATUS, cross_site, is_loopback_host, is_loopback_ip, relayed
from memplane_core.telemetry import Telemetry

from ..config import ProxySettings
from ..errors import ProxyError
from ..rate_limit import retry_after_header
from .sessions import MAX_CLIENTS, FailureThrottle, SessionStore

COOKIE = "memplane_admin"  # the login session id (random per login)
CSRF_COOKIE = "memplane_csrf"  # binds CSRF tokens to a browser before (or without) a session
COOKIE_PATH = "/memplane/"


class OperatorRefused(Exception):
    """A request refused before its credentials are even weighed (wrong Host, throttled, cross-site)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


@dataclass(frozen=True)
class Operator:
    """How the caller proved it is the operator: "bearer", "session" (with its id) or "loopback"."""

    via: str
    session_id: str | None = None


def token_matches(given: str, admin_token: str) -> bool:
    """A constant-time comparison of a presented token with the admin token."""
    return bool(given) and hmac.compare_digest(given.encode(), admin_token.encode())


def _bearer(request: web.Request) -> str | None:
    header = request.headers.get("Authorization")
    if header is None:
        return None
    return header[7:].strip() if header[:7].lower() == "bearer " else header.strip()


class OperatorGate:
    def __init__(self, settings: ProxySettings, telemetry: Telemetry, *,
                 sessions: SessionStore | None = None, throttle: FailureThrottle | None = None) -> None:
        self.settings = settings
        self.telemetry = telemetry
        self.sessions = sessions or SessionStore()
        self.throttle = throttle or FailureThrottle()
        self._csrf_key = secrets.token_bytes(32)
        self._refused: dict[str, int] = {}  # attempts refused while throttled, per address
        self._refused_logged: dict[str, float] = {}

    # -- who is calling --

    def identify(self, request: web.Request) -> Operator | None:
        """The operator, or None (no or wrong credential: a wrong bearer counts as a failure).
        Raises OperatorRefused for a rebinding Host (421) and for a throttled client (429)."""
        admin_token = self.settings.admin_token
        if not admin_token:
            if not is_loopback_ip(request.remote) or relayed(request.headers):
                return None  # a reverse proxy on this machine relays for anyone: not a local caller
            if not is_loopback_host(request.headers.get("Host")):
                raise OperatorRefused(HOST_REFUSED_STATUS, "Operator routes trust loopback callers only under a "
                                      "loopback name (localhost, 127.0.0.1, [::1]); set MEMPLANE_ADMIN_TOKEN "
                                      "to serve other names.")
            return Operator("loopback")
        given = _bearer(request)
        if given is not None:
            self.check_throttle(request)
            if token_matches(given, admin_token):
                return Operator("bearer")
            self.failed(request, "bearer")
            return None
        sid = request.cookies.get(COOKIE, "")
        if sid and self.sessions.valid(sid):
            return Operator("session", sid)
        return None

    def check_throttle(self, request: web.Request) -> None:
        client = request.remote or ""
        wait = self.throttle.blocked(client)
        if wait:
            self._refused[client] = self._refused.get(client, 0) + 1
            if self._refused[client] == 1 or time.monotonic() - self._refused_logged.get(client, 0.0) >= 60:
                # logged once a minute per address, with the count: guessing goes on, the log stays small
                self.telemetry.warning("operator_auth_throttled", client=client, path=request.path,
                                       refused=self._refused[client], retry_after_s=round(wait, 1))
                self._refused_logged[client] = time.monotonic()
                if len(self._refused_logged) > MAX_CLIENTS:
                    self._refused.clear()
                    self._refused_logged.clear()
            raise OperatorRefused(429, "Too many failed admin token attempts from this address; try again later.",
                                  {"Retry-After": retry_after_header(wait)})

    def failed(self, request: web.Request, via: str) -> None:
        """A wrong admin token (login form or bearer): counted per client address and logged."""
        client = request.remote or ""
        failures, wait = self.throttle.fail(client)
        self.telemetry.warning("operator_auth_failed", client=client, path=request.path, via=via,
                               recent_failures=failures, throttled=wait > 0)

    # -- login sessions --

    def login(self, request: web.Request, given: str) -> str | None:
        """A new random session id for the right admin token, else None (counted, logged)."""
        self.check_throttle(request)
        if self.settings.admin_token and token_matches(given, self.settings.admin_token):
            sid = self.sessions.create()
            self.telemetry.info("operator_login", client=request.remote or "", expires_in_s=self.sessions.ttl_s)
            return sid
        self.failed(request, "login")
        return None

    def logout(self, request: web.Request, operator: Operator) -> None:
        if operator.session_id:
            self.sessions.revoke(operator.session_id)
            self.telemetry.info("operator_logout", client=request.remote or "")

    # -- cross-site defences for state-changing routes --

    @staticmethod
    def same_origin(request: web.Request) -> None:
        why = cross_site(request.headers.get("Origin"), request.headers.get("Sec-Fetch-Site"),
                         request.headers.get("Host"))
        if why is not None:
            raise OperatorRefused(403, f"Cross-site requests to operator routes are refused ({why}).")

    def csrf_binding(self, request: web.Request, operator: Operator | None) -> str | None:
        """What a CSRF token is bound to: the login session, else this browser's CSRF cookie."""
        if operator is not None and operator.session_id:
            return "session:" + operator.session_id
        cookie = request.cookies.get(CSRF_COOKIE, "")
        return "browser:" + cookie if cookie else None

    def csrf_token(self, binding: str) -> str:
        return hmac.new(self._csrf_key, binding.encode(), "sha256").hexdigest()

    def check_csrf(self, request: web.Request, operator: Operator | None, given: str) -> None:
        """Forms that ride a cookie (or loopback trust) must carry the token their page was given;
        a bearer header cannot be forged by a web page and needs none."""
        if operator is not None and operator.via == "bearer":
            return
        binding = self.csrf_binding(request, operator)
        if binding is None or not given or not hmac.compare_digest(given, self.csrf_token(binding)):
            raise OperatorRefused(403, "This form is stale or came from another site (CSRF token missing or "
                                       "wrong); reload the page and try again.")


OPERATOR_GATE = web.AppKey("memplane_operator_gate", OperatorGate)


def install(app: web.Application, settings: ProxySettings, telemetry: Telemetry) -> OperatorGate:
    gate = app[OPERATOR_GATE] = OperatorGate(settings, telemetry)
    return gate


def is_admin(request: web.Request, settings: ProxySettings) -> bool:
    """True for the operator (raises OperatorRefused for a rebinding Host or a throttled client)."""
    return request.app[OPERATOR_GATE].identify(request) is not None


def admin_only(request: web.Request, settings: ProxySettings) -> None:
    """For the JSON operator routes: 401/403 in the provider's error shape, 421 and 429 likewise."""
    try:
        if is_admin(request, settings):
            return
    except OperatorRefused as refused:
        code = "rate_limit_exceeded" if refused.status == 429 else "misdirected_request"
        raise ProxyError(refused.status, refused.message, code=code, headers=refused.headers) from None
    if settings.admin_token:
        raise ProxyError(401, "This route needs the admin token (MEMPLANE_ADMIN_TOKEN).", code="invalid_api_key")
    raise ProxyError(403, "Operator routes answer only on loopback unless MEMPLANE_ADMIN_TOKEN is set.",
                     code="forbidden")
