"""One streamed Responses answer with `store_memory` on offer (stream.py runs the rounds).

Events of store_memory `function_call` items are held back; every other item's events are relayed
at once with `output_index` renumbered to follow the items the agent has seen, and every relayed
event gets the next `sequence_number` of the agent's one stream. A follow-up's `response.created`
and `response.in_progress` are dropped; the terminal event (`response.completed`, `.incomplete`,
`.failed`) is held, and the last one closes the stream carrying the items the agent saw, every
call's usage summed, and the id the stream announced first (SDKs require one id; offered only
with `store: false`, so no chain continues from it). No response object the agent gets lists
memplane's tool in `tools`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from ..formats.base import event_doc
from .answers import hide_tool, summed_usage
from .offer import TOOL_NAME

TERMINAL = ("response.completed", "response.incomplete", "response.failed")


@dataclass
class ResponsesRound:
    first_index: int = 0
    first: bool = True
    seq: list[int] = field(default_factory=lambda: [0])  # the agent's stream's next sequence number (shared)
    ids: list[Any] = field(default_factory=lambda: [None])  # the id the agent's stream announced (shared)
    stored: dict[int, dict[str, str]] = field(default_factory=dict)  # output index → call id, arguments
    others: dict[int, int] = field(default_factory=dict)  # the agent's own calls
    shown: dict[int, int] = field(default_factory=dict)  # upstream output index → index the agent sees
    items: dict[int, dict[str, Any]] = field(default_factory=dict)  # the round's output items, as done
    seen_items: list[dict[str, Any]] = field(default_factory=list)  # items the agent saw, earlier rounds included
    terminal: dict[str, Any] | None = None
    raw: list[bytes] = field(default_factory=list)

    def _out(self, doc: dict[str, Any]) -> bytes:
        doc = {**doc, "sequence_number": self.seq[0]}
        self.seq[0] += 1
        if isinstance(doc.get("response"), dict):
            doc["response"] = hide_tool("responses", doc["response"])
        return f"event: {doc.get('type')}\n".encode() + b"data: " + orjson.dumps(doc) + b"\n\n"

    def take(self, raw: bytes) -> bytes | None:
        doc = event_doc(raw)
        if doc is None:
            return raw
        kind = doc.get("type")
        if kind in ("response.created", "response.in_progress"):
            if self.first and isinstance(doc.get("response"), dict):
                self.ids[0] = self.ids[0] or doc["response"].get("id")
            return self._out(doc) if self.first else None
        if kind in TERMINAL:
            self.terminal = doc
            return None
        idx = doc.get("output_index")
        if not isinstance(idx, int):
            return self._out(doc)
        item = doc.get("item") if isinstance(doc.get("item"), dict) else None
        if kind == "response.output_item.added" and item is not None:
            if item.get("type") == "function_call" and item.get("name") == TOOL_NAME:
                self.stored[idx] = {"id": str(item.get("call_id") or ""), "arguments": ""}
            else:
                self.shown[idx] = self.first_index + len(self.shown)
                if str(item.get("type", "")).endswith("_call"):
                    self.others[idx] = self.shown[idx]
        if kind == "response.output_item.done" and item is not None:
            self.items[idx] = item
            if idx in self.stored:
                self.stored[idx]["arguments"] = str(item.get("arguments") or self.stored[idx]["arguments"])
            elif idx in self.shown:
                self.seen_items.append(item)
        if idx in self.stored:
            if kind == "response.function_call_arguments.delta":
                self.stored[idx]["arguments"] += str(doc.get("delta") or "")
            return None
        return self._out({**doc, "output_index": self.shown.get(idx, idx)})

    def usage(self) -> Any:
        response = (self.terminal or {}).get("response")
        return response.get("usage") if isinstance(response, dict) else None

    def closing(self, rounds: list["ResponsesRound"], hidden_usage: bool) -> bytes:
        doc = self.terminal or {"type": "response.completed", "response": {"status": "completed"}}
        response = dict(doc.get("response") or {})
        response["output"] = list(self.seen_items)  # shared by the rounds: every item the agent saw
        if self.ids[0]:
            response["id"] = self.ids[0]  # SDKs require one id through the stream's lifecycle
        if len(rounds) > 1:
            response["usage"] = summed_usage([r.usage() for r in rounds])
        return self._out({**doc, "response": response})

    def assistant_doc(self) -> dict[str, Any]:
        return {"output": [self.items[i] for i in sorted(self.items)]}

    def next_index(self) -> int:
        return self.first_index + len(self.shown)
