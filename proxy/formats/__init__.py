"""One module per provider wire format; the turn handler is generic over them.

`FORMATS` is the one list of what the proxy serves; every path → format question (which route,
which error dialect, which provider a pass-through call goes to, which format a ledgered turn
used) is answered here.
"""

from __future__ import annotations

import posixpath

from ..errors import Dialect
from .anthropic_messages import AnthropicMessages
from .base import StreamState, WireFormat, placement_for
from .openai_chat import OpenAIChat
from .openai_responses import OpenAIResponses

FORMATS: tuple[WireFormat, ...] = (OpenAIChat(), AnthropicMessages(), OpenAIResponses())


def format_for_path(path: str) -> WireFormat | None:
    """The format whose route `path` is or lies under (`/v1/messages/count_tokens` → Anthropic's)."""
    for fmt in FORMATS:
        if path == fmt.route or path.startswith(fmt.route + "/"):
            return fmt
    return None


def provider_for_path(path: str) -> str:
    """Which provider a `/v1/...` call belongs to: Anthropic's routes, else OpenAI."""
    fmt = format_for_path(path)
    return fmt.provider if fmt is not None else "openai"


def dialect_for_path(path: str) -> Dialect:
    """The error shape for a path; a path written with dot segments is judged by where it points
    (and then refused in that shape)."""
    fmt = format_for_path(posixpath.normpath(path or "/"))
    return fmt.dialect if fmt is not None else Dialect.OPENAI


__all__ = ["FORMATS", "AnthropicMessages", "OpenAIChat", "OpenAIResponses", "StreamState", "WireFormat",
           "dialect_for_path", "format_for_path", "placement_for", "provider_for_path"]
