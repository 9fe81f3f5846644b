"""Read the words out of messages and ledger entries, whatever their wire format: what the proxy
searches memory with and what a memory service stores."""

from __future__ import annotations

from typing import Any

import orjson


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
    """The newest user message; with `skip_tool_results`, the newest that asks something: a message
    that answers tool calls is a step of the loop its question started, even when it carries text
    beside the results (a client's `<system-reminder>`, a note), so the question stays the question."""
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if isinstance(m, dict) and m.get("role") == "user":
            if skip_tool_results and (not text_of(m.get("content")) or answers_tools(m.get("content"))):
                continue
            return i
    return None


def answers_tools(content: Any) -> bool:
    """Anthropic: the message carries `tool_result` blocks (OpenAI's tool outputs are not user messages)."""
    return isinstance(content, list) and any(isinstance(p, dict) and p.get("type") == "tool_result" for p in content)


MAX_QUERY_CHARS = 4000  # a recall query's length at most: its head and its tail


def bounded_query(text: str, limit: int = MAX_QUERY_CHARS) -> str:
    """A query no longer than `limit`: the start and the end of a long message (a pasted document
    usually has its question at one end). Why: every word of a query is looked up and scored, so a
    multi-megabyte message would hold the memory service's event loop — and every other agent's
    recall — for seconds, while the encoder reads only its first 256 tokens anyway."""
    if len(text) <= limit:
        return text
    half = limit // 2
    return f"{text[:half]}\n…\n{text[-half:]}"


def query_from(messages: list[Any]) -> str:
    """Text of the latest user turn that has text, plus the turn before it when it is short; at
    most MAX_QUERY_CHARS (`bounded_query`).

    A bare follow-up ("and when was that?") carries little to search with on its own.
    """
    return bounded_query(_query_from(messages))


def _query_from(messages: list[Any]) -> str:
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



def _request_messages(entry: dict[str, Any]) -> list[Any]:
    req = entry.get("request_original") or {}
    if not isinstance(req, dict):
        return []
    if isinstance(req.get("input"), str):
        return [{"role": "user", "content": req["input"]}]
    messages = req.get("messages") if isinstance(req.get("messages"), list) else req.get("input")
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []


def user_text(entry: dict[str, Any]) -> str:
    """The newest user turn's text (what the user said in this turn), and the text the person typed
    beside the tool results of its loop: an Anthropic user message that answers tool calls holds the
    `tool_result` blocks first and may carry text after them, which no tool returned (a Chat or
    Responses client sends the same words as a message of their own, read as the question). A call
    that continues a turn with tool outputs only (a Responses chain step) has the question the proxy
    noted for it."""
    messages = _request_messages(entry)
    i = latest_user_index(messages, skip_tool_results=True)
    if i is not None:
        asked = text_of(messages[i].get("content")).strip()
    else:
        noted = entry.get("turn_question")
        asked = noted.strip() if isinstance(noted, str) else ""
    beside = [text_of(m.get("content")).strip() for m in messages[(i + 1) if i is not None else 0:]
              if m.get("role") == "user" and answers_tools(m.get("content"))]
    return "\n".join(t for t in (asked, *beside) if t)


def calls_tools(entry: dict[str, Any]) -> bool:
    """The answer asks for tool calls: an intermediate step of a tool loop, not the turn's answer."""
    resp = entry.get("response") or {}
    if not isinstance(resp, dict):
        return False
    if resp.get("tool_calls"):
        return True
    doc = resp.get("json")
    if not isinstance(doc, dict):
        return False
    if isinstance(doc.get("choices"), list) and doc["choices"]:
        choice = doc["choices"][0]
        message = choice.get("message") if isinstance(choice, dict) else None
        return bool(isinstance(message, dict) and message.get("tool_calls"))
    for key, kinds in (("content", ("tool_use", "server_tool_use")),
                       ("output", ("function_call", "custom_tool_call", "local_shell_call", "computer_call"))):
        if isinstance(doc.get(key), list) and any(isinstance(b, dict) and b.get("type") in kinds for b in doc[key]):
            return True
    return False


TOOL_STEP_CHARS = 160
TOOL_STEPS = 6


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return text_of(content, ("text", "input_text", "output_text"))
    return ""


def tool_steps(entry: dict[str, Any]) -> list[str]:
    """What the turn's tool loop did, compactly: `name(arguments) → result`, after the question.

    The final step of a loop sends the whole loop (Chat Completions, Messages, Responses with full
    input), so its entry alone can carry the turn; a Responses chain step has only the outputs.
    """
    messages = _request_messages(entry)
    i = latest_user_index(messages, skip_tool_results=True)
    calls: dict[str, str] = {}
    results: dict[str, str] = {}
    order: list[str] = []
    for m in messages[(i + 1) if i is not None else 0:]:
        kind, role = m.get("type"), m.get("role")
        if role == "assistant":
            for call in m.get("tool_calls") if isinstance(m.get("tool_calls"), list) else ():
                if isinstance(call, dict):  # a provider that took odd shapes answered: read what is there
                    fn = call.get("function") if isinstance(call.get("function"), dict) else {}
                    calls[str(call.get("id"))] = f"{fn.get('name')}({fn.get('arguments') or ''})"
                    order.append(str(call.get("id")))
            for block in m.get("content") if isinstance(m.get("content"), list) else ():
                if isinstance(block, dict) and block.get("type") == "tool_use":
                    calls[str(block.get("id"))] = f"{block.get('name')}({_compact_json(block.get('input'))})"
                    order.append(str(block.get("id")))
        elif role == "tool":
            results[str(m.get("tool_call_id"))] = _result_text(m.get("content"))
        elif role == "user" and isinstance(m.get("content"), list):
            for block in m["content"]:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    results[str(block.get("tool_use_id"))] = _result_text(block.get("content"))
        elif kind == "function_call":
            calls[str(m.get("call_id"))] = f"{m.get('name')}({m.get('arguments') or ''})"
            order.append(str(m.get("call_id")))
        elif kind == "function_call_output":
            results[str(m.get("call_id"))] = _result_text(m.get("output"))
            if str(m.get("call_id")) not in calls:
                order.append(str(m.get("call_id")))
    steps = []
    for cid in order[-TOOL_STEPS:]:
        call = calls.get(cid, "tool")
        result = results.get(cid, "")
        steps.append(_clip(f"{call} → {result}" if result else call, TOOL_STEP_CHARS))
    return steps


def _compact_json(value: Any) -> str:
    if value is None:
        return ""
    try:
        return orjson.dumps(value, default=str).decode()
    except orjson.JSONEncodeError:
        return str(value)


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
        choice = doc["choices"][0]
        message = choice.get("message") if isinstance(choice, dict) else None
        return text_of(message.get("content")) if isinstance(message, dict) else ""
    if isinstance(doc.get("content"), list):
        return text_of(doc["content"])
    if isinstance(doc.get("output"), list):
        texts = [text_of(item.get("content"), ("output_text",)) for item in doc["output"] if isinstance(item, dict)]
        return "\n".join(t for t in texts if t)
    return ""


def session_of(entry: dict[str, Any], metadata: dict[str, Any]) -> str | None:
    sid = metadata.get("session_id") or entry.get("session_id")
    return sid if isinstance(sid, str) and sid else None
