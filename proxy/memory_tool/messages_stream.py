"""One streamed Anthropic Messages answer with `store_memory` on offer (stream.py runs the rounds).

Events of store_memory `tool_use` blocks are held back; every other block is relayed at once with
its index renumbered to follow what the agent has already seen (a follow-up's blocks continue the
same message). A follow-up's `message_start` is dropped (the agent's message has started), and
`message_delta` + `message_stop` are held until the end: the last one goes out with every call's
usage summed (input tokens too: SDKs take message_delta's counts as the message's) and, when the
agent never saw a call, `stop_reason: end_turn`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from ..formats.base import event_doc
from .answers import summed_usage
from .offer import TOOL_NAME


def _ev(doc: dict[str, Any]) -> bytes:
    return f"event: {doc.get('type')}\n".encode() + b"data: " + orjson.dumps(doc) + b"\n\n"


@dataclass
class MessagesRound:
    first_index: int = 0  # blocks the agent has seen in earlier rounds
    first: bool = True
    stored: dict[int, dict[str, str]] = field(default_factory=dict)  # block index → id, arguments
    others: dict[int, int] = field(default_factory=dict)  # the agent's own tool_use blocks
    shown: dict[int, int] = field(default_factory=dict)  # upstream block index → index the agent sees
    blocks: dict[int, dict[str, Any]] = field(default_factory=dict)  # the round's content, for the follow-up
    start_usage: dict[str, Any] | None = None
    delta: dict[str, Any] | None = None
    stop: bytes | None = None
    raw: list[bytes] = field(default_factory=list)

    def take(self, raw: bytes) -> bytes | None:
        doc = event_doc(raw)
        if doc is None:
            return raw
        kind = doc.get("type")
        if kind == "message_start":
            msg = doc.get("message") if isinstance(doc.get("message"), dict) else {}
            self.start_usage = msg.get("usage") if isinstance(msg.get("usage"), dict) else None
            return raw if self.first else None
        if kind == "message_delta":
            self.delta = doc
            return None
        if kind == "message_stop":
            self.stop = raw
            return None
        if kind not in ("content_block_start", "content_block_delta", "content_block_stop"):
            return raw  # ping, error: as they came
        idx = doc.get("index")
        if not isinstance(idx, int):
            return raw
        if kind == "content_block_start":
            block = doc.get("content_block") if isinstance(doc.get("content_block"), dict) else {}
            if block.get("type") == "tool_use" and block.get("name") == TOOL_NAME:
                self.stored[idx] = {"id": str(block.get("id") or ""), "arguments": ""}
                return None
            self.shown[idx] = self.first_index + len(self.shown)
            if block.get("type") in ("tool_use", "server_tool_use"):
                self.others[idx] = self.shown[idx]
            self.blocks[idx] = {k: v for k, v in block.items()}
        if idx in self.stored:
            delta = doc.get("delta") if isinstance(doc.get("delta"), dict) else {}
            self.stored[idx]["arguments"] += str(delta.get("partial_json") or "")
            return None
        if kind == "content_block_delta":
            self._keep(idx, doc.get("delta") if isinstance(doc.get("delta"), dict) else {})
        if idx not in self.shown:
            return raw
        return raw if self.shown[idx] == idx else _ev({**doc, "index": self.shown[idx]})

    def _keep(self, idx: int, delta: dict[str, Any]) -> None:
        block = self.blocks.get(idx)
        if block is None:
            return
        for key, field_ in (("text", "text"), ("thinking", "thinking"), ("signature", "signature"),
                            ("partial_json", "_json")):
            if isinstance(delta.get(key), str):
                block[field_] = block.get(field_, "") + delta[key]

    def usage(self) -> Any:
        """This call's usage: message_start's, updated by message_delta's (its counts are cumulative)."""
        late = (self.delta or {}).get("usage")
        return {**(self.start_usage or {}), **(late if isinstance(late, dict) else {})} or None

    def closing(self, rounds: list["MessagesRound"], hidden_usage: bool) -> bytes:
        delta = self.delta or {"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                               "usage": {}}
        if self.stored and not self.others:
            delta = {**delta, "delta": {**(delta.get("delta") or {}), "stop_reason": "end_turn"}}
        if len(rounds) > 1:  # every call's usage, input included (message_delta's counts are cumulative)
            delta = {**delta, "usage": summed_usage([r.usage() for r in rounds])}
        return _ev(delta) + (self.stop or _ev({"type": "message_stop"}))

    def assistant_doc(self) -> dict[str, Any]:
        content = []
        for idx in sorted({*self.blocks, *self.stored}):
            if idx in self.stored:
                s = self.stored[idx]
                try:
                    args = orjson.loads(s["arguments"] or "{}")
                except orjson.JSONDecodeError:
                    args = {}
                content.append({"type": "tool_use", "id": s["id"], "name": TOOL_NAME, "input": args})
                continue
            block = dict(self.blocks[idx])
            if "_json" in block:
                try:
                    block["input"] = orjson.loads(block.pop("_json") or "{}")
                except orjson.JSONDecodeError:
                    block.pop("_json", None)
            if block.get("type") == "text" and not block.get("text"):
                continue  # the API refuses empty text blocks
            content.append(block)
        return {"content": content}

    def next_index(self) -> int:
        return self.first_index + len(self.shown)
