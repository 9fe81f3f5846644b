"""One module per provider wire format; the turn handler is generic over them.

`FORMATS` is the one list of what the proxy serves; every path → format question (which route,
which error dialect, which provider a pass-through call goes to, which format a ledgered turn
used) is answered here.
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping

from ..errors import Dialect
from .anthropic_messages import AnthropicMessages
from .base import DEFAULT_PLACEMENT, StreamState, WireFormat, placement_for
from .openai_chat import OpenAIChat
from .openai_responses import OpenAIResponses

FORMATS: tuple[WireFormat, ...] = (OpenAIChat(), AnthropicMessages(), OpenAIResponses())


def format_for_path(path: str) -> WireFormat | None:
    """The format whose route `path` is or lies under (`/v1/messages/count_tokens` → Anthropic's)."""
    for fmt in FORMATS:
        if path == fmt.route or path.startswith(fmt.route + "/"):
            return fmt
    return None


def speaks_anthropic(headers: Mapping[str, str]) -> bool:
    """The caller uses Anthropic's SDK: it sends `anthropic-version`, or its key in `x-api-key`
    without an OpenAI-style `Authorization` header."""
    return "anthropic-version" in headers or ("x-api-key" in headers and "authorization" not in headers)


def provider_for_path(path: str, headers: Mapping[str, str] | None = None) -> str:
    """Which provider a `/v1/...` call belongs to: Anthropic's routes, or a shared path such as
    `/v1/models` asked in Anthropic's dialect; else OpenAI."""
    fmt = format_for_path(path)
    if fmt is not None:
        return fmt.provider
    return "anthropic" if headers is not None and speaks_anthropic(headers) else "openai"


def dialect_for_path(path: str, headers: Mapping[str, str] | None = None) -> Dialect:
    """The error shape for a path; a path written with dot segments is judged by where it points
    (and then refused in that shape). A shared path answers in the caller's dialect."""
    fmt = format_for_path(posixpath.normpath(path or "/"))
    if fmt is not None:
        return fmt.dialect
    return Dialect.ANTHROPIC if headers is not None and speaks_anthropic(headers) else Dialect.OPENAI


__all__ = ["DEFAULT_PLACEMENT", "FORMATS", "AnthropicMessages", "OpenAIChat", "OpenAIResponses", "StreamState", "WireFormat",
           "dialect_for_path", "format_for_path", "placement_for", "provider_for_path", "speaks_anthropic"]
