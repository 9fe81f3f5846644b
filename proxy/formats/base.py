"""The interface each wire format implements, plus helpers they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import orjson

from ..errors import Dialect, ProxyError
from ..recall_policy import InjectedMemory
from ..sse import parse_event


def append_text(existing: Any, block: str) -> Any:
    """Append `block` after existing system text without touching the bytes before it."""
    if existing is None or existing == "":
        return block
    if isinstance(existing, str):
        return existing + "\n\n" + block
    if isinstance(existing, list):
        return [*existing, {"type": "text", "text": block}]
    return block


def event_json(data: str) -> dict[str, Any] | None:
    """One SSE event's data as a JSON object, or None (the event is relayed untouched)."""
    try:
        ev = orjson.loads(data) if data else None
    except orjson.JSONDecodeError:
        return None
    return ev if isinstance(ev, dict) else None


def event_doc(raw: bytes) -> dict[str, Any] | None:
    """`event_json` of one raw SSE event."""
    return event_json(parse_event(raw)[1])


def usage_counts(usage: Any, prompt_key: str, completion_key: str) -> dict[str, Any] | None:
    """A provider's usage object in the ledger's words (prompt_tokens, completion_tokens)."""
    if not isinstance(usage, dict):
        return None
    return {"prompt_tokens": usage.get(prompt_key), "completion_tokens": usage.get(completion_key)}


class NoCitations:
    """For formats whose answers carry no citation blocks."""

    def citations(self, response: dict[str, Any]) -> list[Any]:
        return []


def require(condition: bool, message: str, param: str | None = None) -> None:
    """A 400 for a malformed body; the error middleware renders it in the caller's dialect."""
    if not condition:
        raise ProxyError(400, message, param=param, code="invalid_request")


@dataclass
class StreamState:
    """Assembles a streamed answer for the ledger while events are forwarded."""

    text_parts: list[str] = field(default_factory=list)
    usage: dict[str, Any] | None = None
    model: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "".join(self.text_parts)


class WireFormat(Protocol):
    name: str  # recall metadata.path: openai | anthropic | responses
    provider: str  # openai | anthropic
    dialect: Dialect
    route: str  # the path the proxy serves this format at, e.g. /v1/chat/completions
    upstream_path: str
    placements: frozenset[str]  # where this format can put the block; others fall back to "trailing"
    chains: bool  # a later call can continue from an answer's id (Responses' previous_response_id)

    def validate(self, body: dict[str, Any]) -> None: ...
    def recall_messages(self, body: dict[str, Any]) -> list[Any]: ...
    def recall_system(self, body: dict[str, Any]) -> Any: ...
    def query(self, body: dict[str, Any]) -> str: ...
    def place(self, requested: str, body: dict[str, Any]) -> tuple[str, str | None]:
        """Where this request can take the block (formats/rules.py), and why when that is not `requested`."""
    def inject(self, body: dict[str, Any], block: str, memories: list[InjectedMemory], service: str,
               placement: str) -> dict[str, Any]: ...
    def response_id(self, response: dict[str, Any]) -> str | None:
        """The id a later call can continue from (`previous_response_id`), where the format has one."""
    def prepare_upstream(self, body: dict[str, Any]) -> tuple[dict[str, Any], bool]: ...
    def feed_event(self, state: StreamState, event: str | None, data: str, hidden_usage: bool) -> bool: ...
    def usage(self, response: dict[str, Any]) -> dict[str, Any] | None:
        """Token usage for the ledger (the answer's text is read by memplane_core.turn_text)."""
    def citations(self, response: dict[str, Any]) -> list[Any]: ...


DEFAULT_PLACEMENT = "trailing"


def placement_for(fmt: WireFormat, requested: str, body: dict[str, Any]) -> tuple[str, str | None]:
    """The manifest's placement where the format has it (else after everything the client sent),
    moved where this request needs it to stay valid; the reason when it moved."""
    if requested not in fmt.placements:
        placed, note = fmt.place(DEFAULT_PLACEMENT, body)
        return placed, f"{requested} is not available for {fmt.name}: {DEFAULT_PLACEMENT}" + (f"; {note}" if note else "")
    return fmt.place(requested, body)


class NoResponseId:
    """For formats without server-side conversation state."""

    chains = False

    def response_id(self, response: dict[str, Any]) -> str | None:
        return None
