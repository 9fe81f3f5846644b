"""OpenAI Chat Completions: `POST /v1/chat/completions`."""

from __future__ import annotations

from typing import Any

from memplane_core.turn_text import latest_user_index, query_from

from ..errors import Dialect
from ..recall_policy import InjectedMemory
from . import rules
from .base import (
    NoCitations,
    NoResponseId,
    StreamState,
    append_text,
    event_json,
    require,
    usage_counts,
)


class OpenAIChat(NoCitations, NoResponseId):
    name = "openai"
    provider = "openai"
    dialect = Dialect.OPENAI
    route = "/v1/chat/completions"
    upstream_path = "/chat/completions"
    placements = frozenset({"trailing", "system", "latest"})

    def validate(self, body: dict[str, Any]) -> None:
        require("messages" in body, "Missing required parameter: 'messages'.", "messages")
        require(isinstance(body["messages"], list) and len(body["messages"]) > 0,
                "'messages' must be a non-empty array.", "messages")
        require(all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in body["messages"]),
                "Each item of 'messages' must be an object with a string 'role'.", "messages")
        require(body.get("stream_options") is None or isinstance(body["stream_options"], dict),
                "'stream_options' must be an object.", "stream_options")

    def recall_messages(self, body: dict[str, Any]) -> list[Any]:
        return body["messages"]

    def recall_system(self, body: dict[str, Any]) -> Any:
        return None

    def query(self, body: dict[str, Any]) -> str:
        return query_from(body["messages"])

    def place(self, requested: str, body: dict[str, Any]) -> tuple[str, str | None]:
        return requested, None

    def inject(self, body: dict[str, Any], block: str, memories: list[InjectedMemory], service: str,
               placement: str) -> dict[str, Any]:
        """`trailing`: a system message after the last message (after tool results too, which the
        API accepts); `latest`: before the newest user message, never between tool calls and their
        answers; `system`: appended to the first system/developer message."""
        messages = list(body["messages"])
        if placement == "trailing":
            messages.append({"role": "system", "content": block})
        elif placement == "latest":
            i = latest_user_index(messages)
            at = rules.safe_chat_index(messages, i if i is not None else len(messages))
            messages.insert(at, {"role": "system", "content": block})
        else:
            for i, m in enumerate(messages):
                if m.get("role") in ("system", "developer"):
                    messages[i] = {**m, "content": append_text(m.get("content"), block)}
                    break
            else:
                messages.insert(0, {"role": "system", "content": block})
        return {**body, "messages": messages}

    def prepare_upstream(self, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        """Ask for usage on streams; the extra usage chunk is hidden from an agent that did not."""
        if not body.get("stream"):
            return body, False
        opts = body.get("stream_options")
        if isinstance(opts, dict) and opts.get("include_usage"):
            return body, False
        return {**body, "stream_options": {**(opts or {}), "include_usage": True}}, True

    def feed_event(self, state: StreamState, event: str | None, data: str, hidden_usage: bool) -> bool:
        chunk = event_json(data) if data != "[DONE]" else None
        if chunk is None:
            return True
        state.model = chunk.get("model", state.model)
        for choice in chunk.get("choices") or ():
            if choice.get("index", 0) == 0:
                delta = choice.get("delta") or {}
                if isinstance(delta.get("content"), str):
                    state.text_parts.append(delta["content"])
                for call in delta.get("tool_calls") or ():
                    fn = call.get("function") or {}
                    calls = state.extra.setdefault("tool_calls", {})
                    slot = calls.setdefault(str(call.get("index", 0)), {"name": "", "arguments": ""})
                    slot["name"] += fn.get("name") or ""
                    slot["arguments"] += fn.get("arguments") or ""
        if chunk.get("usage"):
            state.usage = _usage_of(chunk["usage"])
            if hidden_usage and not chunk.get("choices"):
                return False
        return True

    def usage(self, response: dict[str, Any]) -> dict[str, Any] | None:
        return _usage_of(response.get("usage"))


def _usage_of(usage: Any) -> dict[str, Any] | None:
    return usage_counts(usage, "prompt_tokens", "completion_tokens")
