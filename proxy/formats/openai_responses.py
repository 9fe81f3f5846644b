"""OpenAI Responses API: `POST /v1/responses`."""

from __future__ import annotations

from typing import Any

from memplane_core.foreign_text import foreign_item
from memplane_core.turn_text import latest_user_index, query_from

from ..errors import Dialect
from ..recall_policy import InjectedMemory
from . import rules
from .base import (
    NoCitations,
    StreamState,
    append_text,
    event_json,
    require,
    usage_counts,
)


def _as_messages(inp: Any) -> list[Any]:
    if isinstance(inp, str):
        return [{"role": "user", "content": inp}]
    return [item for item in inp if isinstance(item, dict)]


class OpenAIResponses(NoCitations):
    name = "responses"
    provider = "openai"
    dialect = Dialect.OPENAI
    route = "/v1/responses"
    upstream_path = "/responses"
    placements = frozenset({"trailing", "system", "latest"})
    chains = True

    def validate(self, body: dict[str, Any]) -> None:
        require("input" in body, "Missing required parameter: 'input'.", "input")
        require(isinstance(body["input"], (str, list)),
                "'input' must be a string or an array of input items.", "input")
        instructions = body.get("instructions")
        require(instructions is None or isinstance(instructions, str), "'instructions' must be a string.", "instructions")

    def recall_messages(self, body: dict[str, Any]) -> list[Any]:
        return _as_messages(body["input"])

    def recall_system(self, body: dict[str, Any]) -> Any:
        return body.get("instructions")

    def query(self, body: dict[str, Any]) -> str:
        return query_from(_as_messages(body["input"]))

    def place(self, requested: str, body: dict[str, Any]) -> tuple[str, str | None]:
        """An input item would be stored with the response and carried by every later call of the
        chain, so unless `store` is false the block goes in `instructions`, which is not carried over."""
        if requested in ("trailing", "latest") and rules.responses_input_is_stored(body):
            return "instructions", f"{requested} → instructions: input items are stored by the provider"
        return requested, None

    def inject(self, body: dict[str, Any], block: str, memories: list[InjectedMemory], service: str,
               placement: str) -> dict[str, Any]:
        if placement in ("trailing", "latest"):
            items = _as_messages(body["input"]) if isinstance(body["input"], str) else list(body["input"])
            if placement == "trailing":
                at = len(items)
            else:
                i = latest_user_index(items)
                at = rules.safe_item_index(items, i if i is not None else len(items))
            items.insert(at, {"role": "developer", "content": block})
            return {**body, "input": items}
        return {**body, "instructions": append_text(body.get("instructions"), block)}

    def response_id(self, response: dict[str, Any]) -> str | None:
        rid = response.get("id")
        return rid if isinstance(rid, str) else None

    def prepare_upstream(self, body: dict[str, Any]) -> tuple[dict[str, Any], bool]:
        return body, False  # response.completed carries usage

    def feed_event(self, state: StreamState, event: str | None, data: str, hidden_usage: bool) -> bool:
        ev = event_json(data)
        if ev is None:
            return True
        kind = ev.get("type") or event
        if kind == "response.output_text.delta":
            state.text_parts.append(ev.get("delta", ""))
        elif kind == "response.output_item.done" and foreign_item(ev.get("item")):  # a hosted tool's results
            state.extra["foreign"] = True
        elif kind in ("response.completed", "response.incomplete"):
            response = ev.get("response") or {}
            state.model = response.get("model", state.model)
            state.usage = _usage_of(response.get("usage"))
            state.extra["response_id"] = response.get("id")
            calls = {str(n): {"name": it.get("name") or "", "arguments": it.get("arguments") or ""}
                     for n, it in enumerate(response.get("output") or ())
                     if isinstance(it, dict) and it.get("type") == "function_call"}
            if calls:
                state.extra["tool_calls"] = calls
        return True

    def usage(self, response: dict[str, Any]) -> dict[str, Any] | None:
        return _usage_of(response.get("usage"))


def _usage_of(usage: Any) -> dict[str, Any] | None:
    return usage_counts(usage, "input_tokens", "output_tokens")
