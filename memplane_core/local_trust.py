"""Loopback is not an identity: the checks a server runs before it trusts a request that came
from this machine (DESIGN.md, "Local defaults").

A browser on the operator's machine is also a loopback caller. Web pages reach a loopback
server by DNS rebinding (a hostile name that resolves to 127.0.0.1: the `Host` header gives it
away), by cross-site "simple" requests (a form or `fetch` with a `text/plain` body: no CORS
preflight, but an `Origin` / `Sec-Fetch-Site` header says where it came from), and by
forms that ride an ambient cookie. And a reverse proxy on the same machine (TLS in front, say)
makes every caller a loopback caller: its forwarding headers say the request is relayed for
someone else. Pure functions on header values, so the proxy and every memory service share one
definition.
"""

from __future__ import annotations

import functools
import ipaddress
from urllib.parse import urlsplit

HOST_REFUSED_STATUS = 421  # Misdirected Request: this server does not answer for that name
LOOPBACK_NAMES = frozenset({"localhost", "localhost."})
# Sec-Fetch-Site values a browser sends for a request it did not start from this origin
# ("same-site" includes pages on other loopback ports: cookies do not isolate ports)
FOREIGN_FETCH_SITES = frozenset({"cross-site", "same-site"})


@functools.lru_cache(maxsize=1024)  # every request asks about its peer: the same few addresses
def is_loopback_ip(address: str | None) -> bool:
    try:
        ip = ipaddress.ip_address((address or "").split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or bool(mapped and mapped.is_loopback)


def split_host(host: str) -> tuple[str, str] | None:
    """(name, port) of a `Host` header value, or None when it is not one ("[::1]:80" -> ("::1", "80"))."""
    if host.startswith("["):
        end = host.find("]")
        if end < 0:
            return None
        name, rest = host[1:end], host[end + 1:]
        if rest and not rest.startswith(":"):
            return None
        port = rest[1:]
    else:
        name, sep, port = host.rpartition(":")
        if not sep:
            name, port = host, ""
        elif ":" in name:  # a bare IPv6 address is not a valid Host
            return None
    if port and not (port.isascii() and port.isdigit() and len(port) <= 5):
        return None
    return (name, port) if name else None


@functools.lru_cache(maxsize=256)  # and about its Host header (bounded: the header is the caller's)
def is_loopback_host(host: str | None) -> bool:
    """True for `localhost`, `127.x.y.z` and `[::1]`, with or without a port; False for any other
    name (a rebinding domain that resolves to 127.0.0.1 included) and for a missing Host."""
    parts = split_host((host or "").strip())
    if parts is None:
        return False
    name = parts[0].lower()
    return name in LOOPBACK_NAMES or (name.count(".") == 3 and is_loopback_ip(name)) or \
        (":" in name and is_loopback_ip(name))


def cross_site(origin: str | None, sec_fetch_site: str | None, host: str | None) -> str | None:
    """Why a browser request came from another site (a reason), or None when it did not.

    `Origin` must name this very server (scheme-less compare with `Host`, like the browser's
    own origin of the page); `Origin: null` (sandboxed frames, file: pages) is foreign too.
    Non-browser clients (SDKs, curl, the proxy) send neither header and pass."""
    if sec_fetch_site and sec_fetch_site.strip().lower() in FOREIGN_FETCH_SITES:
        return f"Sec-Fetch-Site: {sec_fetch_site.strip().lower()}"
    if origin is None:
        return None
    origin = origin.strip()
    if origin.lower() == "null" or not origin:
        return "Origin: null"
    try:
        parts = urlsplit(origin)
        netloc, scheme = parts.netloc.lower(), parts.scheme.lower()
    except ValueError:
        return "Origin is not a URL"
    own = (host or "").strip().lower()
    default = {"http": ":80", "https": ":443"}.get(scheme, "")
    if scheme not in ("http", "https") or not netloc or \
            (netloc != own and netloc != own + default and netloc + default != own):
        return "Origin is another site"
    return None


# what reverse proxies add for the client they relay for (RFC 7239; nginx, Caddy, Traefik, Envoy)
FORWARDING_HEADERS = ("Forwarded", "X-Forwarded-For", "X-Real-IP", "X-Forwarded-Host")


def relayed(headers) -> str | None:
    """The forwarding header that says a loopback connection carries another client's request
    (then loopback says nothing about who is calling), or None."""
    return next((name for name in FORWARDING_HEADERS if name in headers), None)


def is_json_content_type(content_type: str | None) -> bool:
    """`application/json`, parameters (charset) allowed; `text/plain` holding JSON is not."""
    mime = (content_type or "").split(";", 1)[0].strip().lower()
    return mime == "application/json"
