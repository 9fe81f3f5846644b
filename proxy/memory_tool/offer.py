"""When memplane offers `store_memory`, and the tool as each wire format declares it.

Offered only when the agent opted in and the request leaves the model free to call a tool of its
choice: not with `tool_choice` none/required/a named tool (the client decided what the model may
call), not with structured output (the answer must be the client's JSON), not on streamed
Responses calls that the provider stores (the stream's id is announced before memplane knows
whether a follow-up is needed, and a chain continued from it would miss the tool's output at the
provider; with `store: false` they are), and not when the
agent has a tool of the same name (the agent's tool wins; the reason is logged).
"""

from __future__ import annotations

from typing import Any

TOOL_NAME = "store_memory"
DESCRIPTION = ("Save a fact worth remembering in later conversations (the user's preferences, decisions, "
               "names, dates). The same key replaces the earlier value. Do not store secrets.")
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "key": {"type": "string", "description": "a short stable name, e.g. 'favourite-editor'"},
        "value": {"type": "string", "description": "the memory itself, one or two sentences"},
        "scope": {"type": "string", "enum": ["session", "agent", "global"],
                  "description": "session: this conversation only; agent (default): every conversation"},
        "metadata": {"type": "object", "description": "optional tags"},
    },
    "required": ["key", "value"],
}
# without a grant the model is not even told about `global` (the write refuses it all the same)
LOCAL_PARAMETERS: dict[str, Any] = {
    **PARAMETERS,
    "properties": {**PARAMETERS["properties"],
                   "scope": {**PARAMETERS["properties"]["scope"], "enum": ["session", "agent"]}},
}


def definition(fmt: str, *, global_granted: bool = False) -> dict[str, Any]:
    params = PARAMETERS if global_granted else LOCAL_PARAMETERS
    if fmt == "anthropic":
        return {"name": TOOL_NAME, "description": DESCRIPTION, "input_schema": params}
    if fmt == "responses":
        return {"type": "function", "name": TOOL_NAME, "description": DESCRIPTION, "parameters": params}
    return {"type": "function", "function": {"name": TOOL_NAME, "description": DESCRIPTION, "parameters": params}}


def _tool_names(fmt: str, tools: list[Any]) -> set[str]:
    names = set()
    for t in tools:
        if not isinstance(t, dict):
            continue
        name = (t.get("function") or {}).get("name") if fmt == "openai" and isinstance(t.get("function"), dict) \
            else t.get("name")
        if isinstance(name, str):
            names.add(name)
    return names


def _choice_forbids(choice: Any) -> str | None:
    """Only `auto` (or no tool_choice) leaves the choice of tool to the model."""
    if choice is None:
        return None
    kind = choice if isinstance(choice, str) else choice.get("type") if isinstance(choice, dict) else None
    return None if kind == "auto" else f"tool_choice {kind or type(choice).__name__}"


def _structured(fmt: str, body: dict[str, Any]) -> bool:
    if fmt == "openai":
        rf = body.get("response_format")
        return isinstance(rf, dict) and rf.get("type") in ("json_schema", "json_object")
    if fmt == "responses":
        text = body.get("text")
        f = text.get("format") if isinstance(text, dict) else None
        return isinstance(f, dict) and f.get("type") in ("json_schema", "json_object")
    oc = body.get("output_config")
    return bool(body.get("output_format")) or (isinstance(oc, dict) and bool(oc.get("format")))


def why_not(fmt: str, body: dict[str, Any], opted_in: bool) -> str | None:
    """None when the tool is offered on this request, else the reason it is not."""
    if not opted_in:
        return "not opted in"
    if fmt == "responses" and body.get("stream") and body.get("store") is not False:
        # the stream names its response id before memplane knows whether a follow-up call is needed;
        # a chain continued from that id would lack the tool's output at the provider
        return "streamed Responses calls the provider stores (store is not false) are not offered the tool"
    if _structured(fmt, body):
        return "structured output requested"
    if (reason := _choice_forbids(body.get("tool_choice"))) is not None:
        return reason
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        return "tools is not a list"
    if TOOL_NAME in _tool_names(fmt, tools or []):
        return f"the agent has a tool named {TOOL_NAME}: its own tool wins"
    return None


def offer(fmt: str, body: dict[str, Any], *, global_granted: bool = False) -> dict[str, Any]:
    """The request with store_memory after the agent's own tools (theirs stay byte-identical first).
    Scope `global` is offered only to an agent whose memory.json grants it."""
    return {**body, "tools": [*(body.get("tools") or []), definition(fmt, global_granted=global_granted)]}
