"""Anthropic Messages: `POST /v1/messages`."""

from __future__ import annotations

from typing import Any

import orjson

from memplane_core.foreign_text import foreign_part
from memplane_core.turn_text import answers_tools, latest_user_index, query_from

from ..errors import Dialect
from ..inject import PREAMBLE, render_memory
from ..recall_policy import InjectedMemory
from . import rules
from .base import NoResponseId, StreamState, append_text, event_json, require, usage_counts


class AnthropicMessages(NoResponseId):
    name = "anthropic"
    provider = "anthropic"
    dialect = Dialect.ANTHROPIC
    route = "/v1/messages"
    upstream_path = "/v1/messages"
    placements = frozenset({"trailing", "system", "latest", "search_results"})

    def validate(self, body: dict[str, Any]) -> None:
        require("messages" in body, "messages: Field required", "messages")
        require(isinstance(body["messages"], list) and len(body["messages"]) > 0,
                "messages: must be a non-empty list", "messages")
        require(all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in body["messages"]),
                "messages: each item must be an object with a string 'role'", "messages")
        system = body.get("system")
        require(system is None or isinstance(system, (str, list)),
                "system: must be a string or a list of content blocks", "system")

    def recall_messages(self, body: dict[str, Any]) -> list[Any]:
        return body["messages"]

    def recall_system(self, body: dict[str, Any]) -> Any:
        return body.get("system")

    def query(self, body: dict[str, Any]) -> str:
        return query_from(body["messages"])

    def place(self, requested: str, body: dict[str, Any]) -> tuple[str, str | None]:
        if requested == "search_results":
            citations, why = rules.search_results_fallback(body)
            if not citations:
                return "latest", why
        return requested, None

    def inject(self, body: dict[str, Any], block: str, memories: list[InjectedMemory], service: str,
               placement: str) -> dict[str, Any]:
        """`trailing`: a text block after everything in the newest user message (the client's
        `cache_control` breakpoints included; none is added, and automatic caching keeps its
        breakpoint on the client's last block). `latest` and `search_results`: in front of the
        question's text, after any `tool_result` blocks.

        The question's message is the newest user message that asks something. In a tool loop's
        later steps the newest one only answers tool calls; with extended thinking, or a placement
        in front of the question, the block stays where the turn's first call put it (rules.py:
        thinking in tool loops): the question's message is then byte-identical to the first
        call's, and the tool results carry nothing else."""
        messages = list(body["messages"])
        i = latest_user_index(messages)
        if i is not None and answers_tools(messages[i].get("content")) and (  # a loop's step
                placement != "trailing" or rules.thinks(body)):
            asked = latest_user_index(messages, skip_tool_results=True)
            i = asked if asked is not None else i
        if placement == "system" or i is None:
            return {**body, "system": append_text(body.get("system"), block)}
        content = messages[i].get("content")
        if isinstance(content, str):  # the same prompt as a text block; an empty one would be refused
            parts = [{"type": "text", "text": content}] if content else []
        else:
            parts = list(content or [])
        if placement == "trailing":
            if i == len(messages) - 1:
                body, parts = rules.pin_automatic_breakpoint(body, parts)
            parts.append({"type": "text", "text": block})
        else:
            if placement == "search_results":
                lead = [{"type": "text", "text": PREAMBLE},
                        *(_search_result(m, service, n) for n, m in enumerate(memories))]
            else:
                lead = [{"type": "text", "text": block}]
            at = rules.after_tool_results(parts)
            parts[at:at] = lead
        messages[i] = {**messages[i], "content": parts}
        return {**body, "messages": messages}

    def prepare_upstream(self, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        return body, False  # Anthropic streams carry usage already

    def feed_event(self, state: StreamState, event: str | None, data: str, hidden_usage: bool) -> bool:
        ev = event_json(data)
        if ev is None:
            return True
        kind = ev.get("type")
        _assemble(state, kind, ev)
        if kind == "message_start":
            msg = ev.get("message") or {}
            state.model = msg.get("model")
            usage = msg.get("usage") or {}
            state.usage = {"prompt_tokens": usage.get("input_tokens"),
                           "completion_tokens": usage.get("output_tokens")}
        elif kind == "content_block_start":
            block = ev.get("content_block") or {}
            if foreign_part(block):  # a server tool's result comes whole in its start event
                state.extra["foreign"] = True
            if block.get("type") in ("tool_use", "server_tool_use"):
                calls = state.extra.setdefault("tool_calls", {})
                calls[str(ev.get("index", len(calls)))] = {"name": block.get("name") or "", "arguments": ""}
        elif kind == "content_block_delta":
            delta = ev.get("delta") or {}
            if delta.get("type") == "text_delta":
                state.text_parts.append(delta.get("text", ""))
            elif delta.get("type") == "input_json_delta":
                slot = state.extra.get("tool_calls", {}).get(str(ev.get("index")))
                if slot is not None:
                    slot["arguments"] += delta.get("partial_json") or ""
            elif delta.get("type") == "citations_delta":
                state.extra.setdefault("citations", []).append(delta.get("citation"))
        elif kind == "message_delta":
            usage = ev.get("usage") or {}
            state.usage = {**(state.usage or {}),
                           "completion_tokens": usage.get("output_tokens",
                                                          (state.usage or {}).get("completion_tokens"))}
            if usage.get("input_tokens") is not None:
                state.usage["prompt_tokens"] = usage["input_tokens"]
        return True

    def usage(self, response: dict[str, Any]) -> dict[str, Any] | None:
        return usage_counts(response.get("usage"), "input_tokens", "output_tokens")

    def reply(self, response: dict[str, Any]) -> tuple[Any, Any]:
        """The answer as the next message of a thread: (message id, content blocks)."""
        return response.get("id"), response.get("content")

    def streamed_reply(self, state: StreamState) -> tuple[Any, Any]:
        """The same for a stream, when it ran to `message_stop`."""
        if not state.extra.get("message_stop"):
            return None, None
        blocks = state.extra.get("blocks") or {}
        return state.extra.get("message_id"), [_finished(blocks[i]) for i in sorted(blocks)]

    def citations(self, response: dict[str, Any]) -> list[Any]:
        found = []
        for block in response.get("content") or ():
            if isinstance(block, dict):
                found.extend(block.get("citations") or ())
        return found


def _search_result(m: InjectedMemory, service: str, n: int) -> dict[str, Any]:
    ref = m.id or f"memory-{n + 1}"
    return {
        "type": "search_result",
        "source": f"memplane://{service}/{ref}",
        "title": m.title or " · ".join(x for x in (m.kind, m.ts) if x) or "memory",
        "content": [{"type": "text", "text": render_memory(m)}],  # escaped, its origin said, like every placement
        "citations": {"enabled": True},
    }


def _assemble(state: StreamState, kind: Any, ev: dict[str, Any]) -> None:
    """Rebuild the answer's content blocks from a stream (a thread memplane holds needs them whole:
    text with citations, tool_use with its input, thinking with its signature)."""
    if kind == "message_start":
        state.extra["message_id"] = (ev.get("message") or {}).get("id")
    elif kind == "message_stop":
        state.extra["message_stop"] = True
    elif kind == "content_block_start" and isinstance(ev.get("content_block"), dict):
        state.extra.setdefault("blocks", {})[ev.get("index", 0)] = dict(ev["content_block"])
    elif kind == "content_block_delta":
        block = (state.extra.get("blocks") or {}).get(ev.get("index", 0))
        delta = ev.get("delta") or {}
        if block is None:
            return
        dt = delta.get("type")
        if dt == "text_delta":
            block["text"] = block.get("text", "") + (delta.get("text") or "")
        elif dt == "input_json_delta":
            block["_json"] = block.get("_json", "") + (delta.get("partial_json") or "")
        elif dt == "thinking_delta":
            block["thinking"] = block.get("thinking", "") + (delta.get("thinking") or "")
        elif dt == "signature_delta":
            block["signature"] = block.get("signature", "") + (delta.get("signature") or "")
        elif dt == "citations_delta":
            block.setdefault("citations", []).append(delta.get("citation"))


def _finished(block: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in block.items() if k != "_json"}
    if "_json" in block:
        try:
            out["input"] = orjson.loads(block["_json"]) if block["_json"] else {}
        except orjson.JSONDecodeError:
            out["input"] = {}
    if out.get("type") == "text" and not out.get("citations"):
        out.pop("citations", None)
    return out
