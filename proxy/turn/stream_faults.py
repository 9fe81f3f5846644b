"""Whether a relayed stream carries the provider's own failure: its error event mid-stream — or
ends without the event every finished answer ends with.

Why: the agent's SDK raises on it (the answer broke off), yet the ledger kept the partial reply as
a finished answer. Marked `incomplete: provider_error`, the turn is ledgered as one that broke off
for any other reason (`upstream_broke_off`, `client_disconnected`): its reply is not taken for the
model's answer, and retain keeps the person's words as it does for those. The agent still gets the
stream exactly as the provider sent it (memplane adds its own error event only to a stream that
broke off without one: sse.end_stream).
"""

from __future__ import annotations

from ..formats.base import event_json

PROVIDER_ERROR = "provider_error"
# A stream the provider closed cleanly but before its last event: Chat Completions' `data: [DONE]`,
# Messages' `message_stop`, Responses' `response.completed` / `.incomplete` / `.failed` (each API's
# streaming reference). Its reply is cut like one that broke off: not taken for the model's answer.
UNFINISHED = "stream_unfinished"
_LAST = ("message_stop", "response.completed", "response.incomplete", "response.failed", "error")
_FAILED = ("error", "response.failed")  # Anthropic's and Responses' error event; a Responses answer that failed


def provider_error(name: str | None, data: str) -> bool:
    """One parsed event (sse.parse_event) is the provider's failure: Anthropic's `event: error`
    ("Error events", Messages streaming docs), the Responses `error` / `response.failed` events, or a
    Chat Completions chunk holding `error` (what the openai SDK raises APIError on)."""
    if name in _FAILED:
        return True
    if '"error"' not in data and "response.failed" not in data:  # most events: no JSON parse
        return False
    ev = event_json(data)
    return ev is not None and (ev.get("type") in _FAILED or isinstance(ev.get("error"), dict)
                               and not isinstance(ev.get("response"), dict))


def last_event(name: str | None, data: str) -> bool:
    """One parsed event ends an answer: `[DONE]`, or an event (named, or typed in its data) of `_LAST`."""
    if data == "[DONE]" or name in _LAST:
        return True
    if not any(f'"{kind}"' in data for kind in _LAST):  # most events: no JSON parse
        return False
    ev = event_json(data)
    return ev is not None and ev.get("type") in _LAST
