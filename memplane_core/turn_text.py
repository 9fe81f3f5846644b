"""Read the words out of messages and ledger entries, whatever their wire format: what the proxy
searches memory with and what a memory service stores."""

from __future__ import annotations

from typing import Any


def text_of(content: Any, part_types: tuple[str, ...] = ("text", "input_text")) -> str:
    """The plain text of a message's content: a string or a list of typed parts.

    Images, documents and tool results are ignored, so they never shape a recall query.
    """
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [p.get("text", "") for p in content
                 if isinstance(p, dict) and p.get("type") in part_types and isinstance(p.get("text"), str)]
        return "\n".join(t for t in texts if t)
    return ""


def latest_user_index(messages: list[Any], *, skip_tool_results: bool = False) -> int | None:
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, dict) and m.get("role") == "user":
            if skip_tool_results and not text_of(m.get("content")):
                continue
            return i
    return None


def query_from(messages: list[Any]) -> str:
    """Text of the latest user turn that has text, plus the turn before it when it is short.

    A bare follow-up ("and when was that?") carries little to search with on its own.
    """
    i = latest_user_index(messages, skip_tool_results=True)
    if i is None:
        return ""
    latest = text_of(messages[i].get("content")).strip()
    if len(latest.split()) < 6:
        for j in range(i - 1, -1, -1):
            m = messages[j]
            if isinstance(m, dict) and m.get("role") in ("user", "assistant"):
                prev = text_of(m.get("content"), ("text", "input_text", "output_text")).strip()
                if prev:
                    return f"{prev}\n{latest}"
    return latest



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
