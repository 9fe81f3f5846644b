"""Which calls of a coding agent are not the person's turns, and what each gets (DESIGN.md,
"Coding agents: side calls and continued sessions").

| call                                   | block | memory                          |
|----------------------------------------|-------|---------------------------------|
| `count_tokens` (a pass-through path)   | no    | no                              |
| a coding client's tool-less call       | no    | no (titles, topic checks, summaries of a line) |
| subagent (`cc_is_subagent=true`)       | yes   | no (the parent's tool line has it) |
| compaction request                     | no    | the session's summary, once     |

A coding client is known by its `User-Agent` (`claude-cli/…`, `codex_…`, `QwenCode/…`,
`GeminiCLI/…`) or by a subagent marker; other agents' tool-less calls are turns like any other.
A compaction request is recognised by what it asks: a summary of the conversation so far (Claude
Code's "create a detailed summary of the conversation", Codex's "CONTEXT CHECKPOINT COMPACTION",
Gemini-family clients' "generate the <state_snapshot>").
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import re2

from memplane_core.memo import TextMemo
from memplane_core.turn_text import text_of

_CODING_CLIENT = re2.compile(r"(?i)^(claude-cli|claude-code|codex[_ -]|codex/|qwen-?code|geminicli|gemini-cli)")
_SUBAGENT = "cc_is_subagent=true"
_COMPACT = re2.compile(
    r"(?i)((create|write|provide|produce|generate)\s+an?\s+([a-z]+\s+){0,3}summary\s+of\s+(the|this|our)\s+"
    r"([a-z]+\s+){0,2}conversation|context\s+checkpoint\s+compaction|summari[sz]e\s+(the|this|our)\s+"
    r"([a-z]+\s+){0,2}conversation\s+so\s+far|generate\s+the\s+<state_snapshot>)")


class SideCall(str, Enum):
    TURN = "turn"
    SIDE = "side"  # a coding client's tool-less call
    SUBAGENT = "subagent"
    COMPACTION = "compaction"


def _system_text(body: dict[str, Any]) -> str:
    system = body.get("system")
    texts = [system if isinstance(system, str) else text_of(system)]
    if isinstance(body.get("instructions"), str):
        texts.append(body["instructions"])
    items = body.get("messages") if isinstance(body.get("messages"), list) else body.get("input")
    for m in items if isinstance(items, list) else ():
        if isinstance(m, dict) and m.get("role") in ("system", "developer"):
            texts.append(text_of(m.get("content")))
    return "\n".join(t for t in texts if t)


def _last_user_text(body: dict[str, Any]) -> str:
    items = body.get("messages") if isinstance(body.get("messages"), list) else body.get("input")
    if isinstance(items, str):
        return items
    for m in reversed(items if isinstance(items, list) else []):
        if isinstance(m, dict) and m.get("role") == "user":
            content = m.get("content")
            if isinstance(content, list):
                texts = [p.get("text") for p in content if isinstance(p, dict) and isinstance(p.get("text"), str)]
                return texts[-1] if texts else ""
            return content if isinstance(content, str) else ""
    return ""


# User-Agent -> a coding client? (an agent sends the same one every call)
_CLIENTS: TextMemo[bool] = TextMemo(entries=1024, key_chars=512)


def is_coding_client(user_agent: str | None) -> bool:
    if not user_agent:
        return False
    known = _CLIENTS.get(user_agent)
    if known is None:
        known = _CODING_CLIENT.search(user_agent) is not None
        _CLIENTS.put(user_agent, known)
    return known


def classify(headers: Any, body: dict[str, Any]) -> SideCall:
    """What kind of call this is (see the module docstring)."""
    last = _last_user_text(body)[-4000:]
    folded = last.casefold()  # every compaction ask holds these words: a cheap test first
    if (("summar" in folded and "conversation" in folded) or "compaction" in folded or "state_snapshot" in folded) \
            and _COMPACT.search(last) is not None:
        return SideCall.COMPACTION
    if _SUBAGENT in _system_text(body):
        return SideCall.SUBAGENT
    tools = body.get("tools") or body.get("functions")
    if not tools and is_coding_client(headers.get("User-Agent") if headers is not None else None):
        return SideCall.SIDE
    return SideCall.TURN
