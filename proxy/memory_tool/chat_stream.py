"""One streamed Chat Completions answer with `store_memory` on offer (stream.py runs the rounds):
content deltas go to the agent as they arrive; store_memory call deltas are held back, and so are
the last chunks (finish_reason, usage, `[DONE]`) until memplane knows how the answer ends. The
agent's own calls are renumbered from index 0 (its SDK assembles calls by index)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from ..formats.base import event_json
from ..sse import parse_event
from .answers import summed_usage
from .offer import TOOL_NAME


def _sse(doc: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(doc) + b"\n\n"


@dataclass
class ChatRound:
    """One provider stream: what went to the agent, what was held back."""

    first_index: int = 0  # unused: every round's calls start at 0 (a spliced round only has text for the agent)
    first: bool = True

    stored: dict[int, dict[str, str]] = field(default_factory=dict)  # call index → id, arguments
    others: dict[int, int] = field(default_factory=dict)  # the agent's calls: upstream index → index it sees
    text: list[str] = field(default_factory=list)
    finish: dict[str, Any] | None = None  # the chunk with finish_reason
    usage_chunk: dict[str, Any] | None = None
    done: bytes | None = None
    raw: list[bytes] = field(default_factory=list)

    def take(self, raw: bytes) -> bytes | None:
        """The bytes the agent gets for one upstream event (None: held back or nothing left)."""
        _, data = parse_event(raw)
        if data == "[DONE]":
            self.done = raw
            return None
        doc = event_json(data)
        if doc is None:
            return raw
        choices = doc.get("choices") if isinstance(doc.get("choices"), list) else []
        if not choices and doc.get("usage") is not None:
            self.usage_chunk = doc
            return None
        changed, kept = False, []
        for ch in choices:
            if not isinstance(ch, dict):
                kept.append(ch)
                continue
            delta = ch.get("delta") if isinstance(ch.get("delta"), dict) else {}
            if ch.get("index", 0) == 0:
                if isinstance(delta.get("content"), str):
                    self.text.append(delta["content"])
                if delta.get("tool_calls"):
                    delta, changed = self._calls(delta), True
            if ch.get("finish_reason"):
                self.finish = {**doc, "choices": [{**ch, "delta": delta}]}
                changed = True
                continue
            if changed and not delta:  # it held only store_memory call deltas
                continue
            kept.append({**ch, "delta": delta} if changed else ch)
        if doc.get("usage") is not None:
            self.usage_chunk = {**doc, "choices": []}
        if not changed:
            return raw
        if not kept:
            return None
        return _sse({**doc, "choices": kept})

    def _calls(self, delta: dict[str, Any]) -> dict[str, Any]:
        kept = []
        for c in delta["tool_calls"]:
            if not isinstance(c, dict):
                continue
            idx = c.get("index", 0)
            fn = c.get("function") if isinstance(c.get("function"), dict) else {}
            if idx not in self.stored and idx not in self.others:
                if fn.get("name") == TOOL_NAME:
                    self.stored[idx] = {"id": "", "arguments": ""}
                else:
                    self.others[idx] = len(self.others)
            if idx in self.stored:
                slot = self.stored[idx]
                slot["id"] = c.get("id") or slot["id"]
                slot["arguments"] += fn.get("arguments") or ""
            else:
                kept.append({**c, "index": self.others[idx]})
        rest = {k: v for k, v in delta.items() if k != "tool_calls"}
        return {**rest, "tool_calls": kept} if kept else rest

    def next_index(self) -> int:
        return 0

    def usage(self) -> Any:
        return self.usage_chunk.get("usage") if self.usage_chunk else None

    def closing(self, rounds: list["ChatRound"], hidden_usage: bool) -> bytes:
        """The held-back end of the stream, for the last round."""
        out = b""
        if self.finish is not None:
            if not self.others and self.stored:  # the agent never saw a call: the answer simply ends
                self.finish["choices"][0]["finish_reason"] = "stop"
            out += _sse(self.finish)
        if self.usage_chunk is not None and not hidden_usage:
            out += _sse({**self.usage_chunk, "usage": summed_usage([r.usage() for r in rounds])})
        return out + (self.done or b"data: [DONE]\n\n")

    def assistant_doc(self) -> dict[str, Any]:
        """The model's turn as a whole answer (answers.follow_up appends it)."""
        return {"choices": [{"message": {
            "role": "assistant", "content": "".join(self.text) or None,
            "tool_calls": [{"id": s["id"], "type": "function", "function": {"name": TOOL_NAME, "arguments": s["arguments"]}}
                           for s in self.stored.values()]}}]}


