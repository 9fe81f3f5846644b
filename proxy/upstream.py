"""Where a call goes upstream and with which credentials: the agent's token never leaves.

Whose provider credential goes upstream: the operator's (the default), or — for an agent whose
metadata.json says `"provider_key": "client"` — the client's own `Authorization` / `x-api-key`, the
agent then naming itself in `X-Memplane-Agent` (CONTRACT §1). The client's credential is only ever
copied into the upstream request's headers: never logged, ledgered, stored or sent to a memory service.
"""

from __future__ import annotations

from collections.abc import Callable

from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from . import __version__
from .config import ProxySettings
from .errors import ProxyError

PRODUCT = f"memplane/{__version__}"

# Request headers an agent may pass through to its provider. Not `OpenAI-Organization` /
# `OpenAI-Project`: they name the key's owner, and next to the operator's key an agent's own would be
# refused (401 mismatched_organization); the operator may set theirs (ProxySettings).
_FORWARD = ("accept", "anthropic-version", "anthropic-beta", "openai-beta", "idempotency-key")
# Response headers worth handing back to the agent.
_RETURN = ("content-type", "openai-processing-ms", "openai-version", "x-request-id", "request-id",
           "anthropic-ratelimit-requests-remaining", "anthropic-ratelimit-tokens-remaining",
           "x-ratelimit-remaining-requests", "x-ratelimit-remaining-tokens", "retry-after")


def upstream_target(settings: ProxySettings, provider: str, path: str) -> str:
    """`path` is relative to the provider base: `/chat/completions` for OpenAI (base has /v1)."""
    base = settings.anthropic_base_url if provider == "anthropic" else settings.openai_base_url
    return base + path


def passthrough_url(settings: ProxySettings, provider: str, raw_path: str) -> URL:
    """The provider URL for a pass-through path as the agent sent it on the wire, already checked by
    `check_raw_path`. `encoded=True`: yarl must not decode and re-read it (`%3F` would become a query)."""
    base = settings.anthropic_base_url if provider == "anthropic" else settings.openai_base_url
    rel = raw_path if provider == "anthropic" else raw_path[len("/v1"):]
    return URL(str(URL(base)) + rel, encoded=True)


AGENT_HEADER = "X-Memplane-Agent"  # `<agent-id>:<secret>` when the credential headers hold the client's own key
# the client's own credential, and what names its owner (right next to the owner's key, unlike the operator's)
_CLIENT_CREDENTIAL = ("Authorization", "x-api-key", "OpenAI-Organization", "OpenAI-Project")


def user_agent(incoming: CIMultiDictProxy[str]) -> str:
    """The client's `User-Agent` as sent, with memplane's product token after it (RFC 9110 §10.1.5:
    products in order of significance): a provider sees which agent called, as without memplane."""
    client = incoming.get("User-Agent", "").strip()
    return f"{client} {PRODUCT}" if client else PRODUCT


def upstream_headers(settings: ProxySettings, provider: str,
                     incoming: CIMultiDictProxy[str], *, client_key: bool = False) -> dict[str, str]:
    """The upstream request's headers. `client_key`: the agent brings its own credential (checked by
    `check_credentials`), forwarded as sent; otherwise only the operator's is attached."""
    headers = {k: incoming[k] for k in _FORWARD if k in incoming}
    headers["User-Agent"] = user_agent(incoming)
    headers["Content-Type"] = "application/json"
    if provider == "anthropic":
        headers.setdefault("anthropic-version", "2023-06-01")
    if client_key:
        headers.update((k, incoming[k]) for k in _CLIENT_CREDENTIAL if k in incoming)
        return headers
    if provider == "anthropic":
        if settings.anthropic_api_key:
            headers["x-api-key"] = settings.anthropic_api_key
    else:
        if settings.openai_api_key:
            headers["Authorization"] = f"Bearer {settings.openai_api_key}"
        if settings.openai_organization:
            headers["OpenAI-Organization"] = settings.openai_organization
        if settings.openai_project:
            headers["OpenAI-Project"] = settings.openai_project
    return headers


def returned_headers(upstream: CIMultiDictProxy[str]) -> CIMultiDict[str]:
    return CIMultiDict((k, upstream[k]) for k in _RETURN if k in upstream)


def agent_token(headers: CIMultiDictProxy[str]) -> str | None:
    """The agent's `<agent-id>:<secret>`: from `X-Memplane-Agent` when the client sent one (its
    `Authorization` / `x-api-key` are then its own provider credential), else from
    `Authorization: Bearer` or `x-api-key`."""
    if AGENT_HEADER in headers:
        return headers[AGENT_HEADER].strip() or None
    auth = headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return headers.get("x-api-key", "").strip() or None


def check_credentials(client_key: bool, headers: CIMultiDictProxy[str],
                      is_memplane_token: Callable[[str], bool]) -> None:
    """An agent that brings its own provider credential must name itself in X-Memplane-Agent and
    send that credential (401 otherwise: its agent token alone would leave with no key, and the
    operator's is not its to use). Another agent's client credential is simply never forwarded.
    `is_memplane_token`: whether a value is any agent's memplane token, which never goes upstream."""
    if not client_key:
        return
    if AGENT_HEADER not in headers:
        raise ProxyError(401, "This agent brings its own provider key: send it as the API key and name the agent "
                              f"in the {AGENT_HEADER} header ('<agent-id>:<secret>').", code="invalid_api_key")
    key, auth = headers.get("x-api-key", "").strip(), headers.get("Authorization", "").strip()
    if not (key or auth):
        raise ProxyError(401, "This agent brings its own provider key, and the request carries none "
                              "(Authorization or x-api-key).", code="invalid_api_key")
    token = headers[AGENT_HEADER].strip()
    if token in (key, auth, auth[7:].strip() if auth[:7].lower() == "bearer " else None):
        # the agent's token in the credential's place would be forwarded to the provider: never
        raise ProxyError(401, "The API key is this agent's memplane token; send your own provider key there "
                              f"(the token goes only in {AGENT_HEADER}).", code="invalid_api_key")
    if any(is_memplane_token(v) for v in (key, auth[7:].strip() if auth[:7].lower() == "bearer " else auth) if v):
        raise ProxyError(401, "The API key is a memplane agent token, not a provider key; send your own provider "
                              f"key there (an agent's token goes only in {AGENT_HEADER}).", code="invalid_api_key")
