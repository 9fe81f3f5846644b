"""Where a call goes upstream and with which credentials: the agent's token never leaves."""

from __future__ import annotations

from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from .config import ProxySettings

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


def upstream_headers(settings: ProxySettings, provider: str,
                     incoming: CIMultiDictProxy[str]) -> dict[str, str]:
    headers = {k: incoming[k] for k in _FORWARD if k in incoming}
    headers["Content-Type"] = "application/json"
    if provider == "anthropic":
        headers.setdefault("anthropic-version", "2023-06-01")
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
    """The agent's `<agent-id>:<secret>` from `Authorization: Bearer` or `x-api-key`."""
    auth = headers.get("Authorization", "")
    if auth[:7].lower() == "bearer ":
        return auth[7:].strip() or None
    return headers.get("x-api-key", "").strip() or None
