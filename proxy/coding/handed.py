"""The words an agent's model hands to a tool: a subagent's task is the model's, not the person's.

An app whose tool is another agent (the OpenAI Agents SDK's `agent.asTool()`, a `task` tool that
starts a subagent) runs that agent with a user message the model wrote as the tool call's argument.
Those calls name no session a client shares with the parent, so `own-conversation-in-session`
cannot tell them; their shape can: their conversation opens with text the agent's model just
passed to a tool. memplane notes the string arguments of each answer's tool calls (digests,
bounded, per agent: `sessions.py`), and a call whose conversation opens with one of them is a
`subagent` (`handed-by-tool-call`): a block, no memory.

Read from the answer as the ledger keeps it (`proxy/turn/answer.py`): whole JSON (chat
completions, Responses, Messages) or a stream's assembled `tool_calls`. The answer is recorded
before the client gets its end, so the subagent's first call always comes after.
"""

from __future__ import annotations

from typing import Any

import orjson

MIN_CHARS = 20  # a shorter argument ("ok", a path) is no task: it could open a person's own message
MAX_ARGS = 16  # string arguments noted per answer


def _strings(value: Any, out: list[str]) -> None:
    if isinstance(value, str):
        if len(value.strip()) >= MIN_CHARS and len(out) < MAX_ARGS:
            out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)


def _arguments(raw: Any) -> Any:
    """A call's arguments: a JSON string (OpenAI) or an object (Anthropic's `input`)."""
    if isinstance(raw, str):
        try:
            return orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw
    return raw


def _calls(response: dict[str, Any]) -> list[Any]:
    if isinstance(response.get("tool_calls"), list):  # a stream's, assembled
        return [_arguments(c.get("arguments")) for c in response["tool_calls"] if isinstance(c, dict)]
    doc = response.get("json")
    if not isinstance(doc, dict):
        return []
    out: list[Any] = []
    for choice in doc.get("choices") if isinstance(doc.get("choices"), list) else ():
        message = choice.get("message") if isinstance(choice, dict) else None
        for call in (message or {}).get("tool_calls") or () if isinstance(message, dict) else ():
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                out.append(_arguments(fn.get("arguments")))
    for item in doc.get("output") if isinstance(doc.get("output"), list) else ():
        if isinstance(item, dict) and item.get("type") == "function_call":
            out.append(_arguments(item.get("arguments")))
    for block in doc.get("content") if isinstance(doc.get("content"), list) else ():
        if isinstance(block, dict) and block.get("type") == "tool_use":
            out.append(block.get("input"))
    return out


def handed_texts(response: Any) -> list[str]:
    """The string arguments (≥ MIN_CHARS) of the tool calls an answer asks for."""
    if not isinstance(response, dict):
        return []
    out: list[str] = []
    for args in _calls(response):
        _strings(args, out)
    return out
