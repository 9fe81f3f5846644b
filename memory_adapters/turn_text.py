"""Read the user's and the assistant's words out of a ledger entry, whatever its wire format."""

from __future__ import annotations

from typing import Any

from proxy.formats.base import latest_user_index, text_of


def user_text(entry: dict[str, Any]) -> str:
    """The newest user turn's text (what the user said in this turn)."""
    req = entry.get("request_original") or {}
    if not isinstance(req, dict):
        return ""
    if isinstance(req.get("input"), str):
        return req["input"]
    messages = req.get("messages") if isinstance(req.get("messages"), list) else req.get("input")
    if not isinstance(messages, list):
        return ""
    i = latest_user_index(messages, skip_tool_results=True)
    return text_of(messages[i].get("content")).strip() if i is not None else ""


def assistant_text(entry: dict[str, Any]) -> str:
    resp = entry.get("response") or {}
    if not isinstance(resp, dict):
        return ""
    if resp.get("format") in ("sse", "text"):
        return str(resp.get("text") or "")
    doc = resp.get("json")
    if not isinstance(doc, dict):
        return ""
    if isinstance(doc.get("choices"), list) and doc["choices"]:
        message = (doc["choices"][0] or {}).get("message") or {}
        return text_of(message.get("content"))
    if isinstance(doc.get("content"), list):
        return text_of(doc["content"])
    if isinstance(doc.get("output"), list):
        texts = [text_of(item.get("content"), ("output_text",)) for item in doc["output"] if isinstance(item, dict)]
        return "\n".join(t for t in texts if t)
    return ""


def session_of(entry: dict[str, Any], metadata: dict[str, Any]) -> str | None:
    sid = metadata.get("session_id") or entry.get("session_id")
    return sid if isinstance(sid, str) and sid else None
