"""What the ledger keeps of a provider's answer: a whole answer read as JSON (or kept as text), a
streamed one assembled from its events. Parsing is best effort: an answer of an unexpected shape is
still relayed and ledgered as it came."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import orjson

from memplane_core.foreign_text import answer_carries_foreign_text

from ..formats import StreamState, WireFormat
from ..formats.base import event_json
from ..ledger.entry import nests_safely
from ..sse import SSESplitter, parse_event
from .answer_cap import Head, mark, whole_head
from .stream_faults import PROVIDER_ERROR, UNFINISHED, last_event, provider_error


def safe_feed(fmt: WireFormat, state: StreamState, event: str | None, data: str, hidden_usage: bool) -> bool:
    """Parsing for the ledger is best effort: an event of an unexpected shape is relayed as it is."""
    try:
        return fmt.feed_event(state, event, data, hidden_usage)
    except Exception:
        state.extra["unparsed_events"] = state.extra.get("unparsed_events", 0) + 1
        return True


def whole_record(fmt: WireFormat, data: bytes, limit: int | None = None) -> dict[str, Any]:
    """A whole answer as the ledger keeps it: its JSON, usage, model, response id, reply, citations;
    one longer than `limit` bytes, its head (answer_cap.py)."""
    if limit is not None and len(data) > limit:
        return whole_head(data, limit)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        doc = data
    if doc is data or not nests_safely(doc):  # not JSON, or deeper than the ledger can write: kept as text
        return {"response": {"format": "text", "text": data.decode("utf-8", "replace")}, "usage": None, "model": None}
    usage = None
    try:  # an answer of an unexpected shape is still ledgered, whole, as the JSON it was
        usage = fmt.usage(doc) if isinstance(doc, dict) else None
    except Exception:
        usage = None
    model = doc.get("model") if isinstance(doc, dict) and isinstance(doc.get("model"), str) else None
    record: dict[str, Any] = {"response": {"format": "json", "json": doc}, "usage": usage, "model": model,
                              "response_id": fmt.response_id(doc) if isinstance(doc, dict) else None}
    if answer_carries_foreign_text(doc):
        record["foreign"] = True
    if isinstance(doc, dict) and hasattr(fmt, "reply"):
        record["reply"] = fmt.reply(doc)
    if isinstance(doc, dict):
        try:
            cites = fmt.citations(doc)
        except Exception:
            cites = None
        if cites:
            record["citations"] = cites
    return record


def first_response_id(fmt: WireFormat, events: list[bytes]) -> str | None:
    """The response id an event of the stream carries (Responses: `response.created` comes first)."""
    for raw in events:
        ev = event_json(parse_event(raw)[1])
        if ev is not None and isinstance(ev.get("response"), dict):
            rid = fmt.response_id(ev["response"])
            if rid:
                return rid
    return None


def stream_record(fmt: WireFormat, received: Iterable[bytes], hidden_usage: bool,
                  incomplete: str | None) -> dict[str, Any]:
    """A streamed answer as the ledger keeps it, assembled from the events relayed (or the head of
    them the ledger keeps: answer_cap.py); one that carries the provider's error event is
    incomplete (stream_faults.py)."""
    st = StreamState()
    body = b"".join(received)
    failed = ended = False
    for raw in SSESplitter().feed(body + b"\n\n"):
        event = parse_event(raw)
        safe_feed(fmt, st, *event, hidden_usage)
        failed = failed or provider_error(*event)
        ended = ended or last_event(*event)
    truncated = isinstance(received, Head) and received.truncated  # its end is past the head kept
    incomplete = incomplete or (PROVIDER_ERROR if failed else None) or (UNFINISHED if not ended and not truncated else None)
    response: dict[str, Any] = {"format": "sse", "text": st.text}
    if not st.text and not st.extra.get("tool_calls"):
        response["raw"] = body.decode("utf-8", "replace")  # nothing could be read out: keep what was relayed
    if st.extra.get("tool_calls"):
        response["tool_calls"] = list(st.extra["tool_calls"].values())
    if incomplete:
        response["incomplete"] = incomplete
    if truncated:
        mark(response, received.seen)
    record: dict[str, Any] = {"response": response, "usage": st.usage, "model": st.model,
                              "response_id": st.extra.get("response_id")}
    if hasattr(fmt, "streamed_reply") and not incomplete and not truncated:
        record["reply"] = fmt.streamed_reply(st)
    if st.extra.get("citations"):
        record["citations"] = st.extra["citations"]
    if st.extra.get("foreign"):  # a provider-run tool's results came in the stream (the formats' feed_event)
        record["foreign"] = True
    return record

