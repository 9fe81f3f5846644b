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

from collections import deque
from typing import Any

import orjson

MIN_CHARS = 20  # a shorter argument ("ok", a path) is no task: it could open a person's own message
MAX_ARGS = 16  # string arguments noted per answer
MAX_NODES = 1000  # argument values looked at per call


def _strings(value: Any, out: list[str]) -> None:
    """The long-enough strings in a call's arguments, breadth first, at most MAX_ARGS of them and
    MAX_NODES values looked at: a model's output may nest deeply or flood (no recursion here)."""
    queue, seen = deque([value]), 0
    while queue and len(out) < MAX_ARGS and seen < MAX_NODES:
        v = queue.popleft()
        seen += 1
        if isinstance(v, str):
            if len(v.strip()) >= MIN_CHARS:
                out.append(v)
        elif isinstance(v, dict):
            queue.extend(v.values())
        elif isinstance(v, list):
            queue.extend(v)


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
        calls = message.get("tool_calls") if isinstance(message, dict) else None
        for call in calls if isinstance(calls, list) else ():
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
