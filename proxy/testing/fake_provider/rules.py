"""What the real provider APIs refuse with 400, one checker per wire format.

Each rule cites the documentation that states it. A checker returns a `Problem` (message and
param, rendered in the provider's own error shape by the server) or None when the real API would
accept the request. Only request shapes memplane can produce or change are checked; the point is
that a request memplane forwards is one the real API accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Problem:
    message: str
    param: str | None = None
    status: int = 400
    code: str | None = None
    details: dict[str, Any] | None = None  # Anthropic's machine-readable `error.details`


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _tools_problem(body: dict[str, Any], message: str) -> Problem | None:
    """`tools`, when given, is a list of objects (every API's reference says so)."""
    tools = body.get("tools")
    if tools is not None and not (isinstance(tools, list) and all(isinstance(t, dict) for t in tools)):
        return Problem(message, "tools")
    return None


_JSON_KINDS = ((bool, "a boolean"), (int, "an integer"), (float, "a decimal"), (str, "a string"),
               (list, "an array"), (dict, "an object"))


def _kind(value: Any) -> str:
    """A JSON value's type as OpenAI's errors name it ("expected a string, but got an array instead")."""
    return next((name for t, name in _JSON_KINDS if isinstance(value, t)), "null")


def _openai_types_problem(body: dict[str, Any], fields: dict[str, tuple[str, bool]]) -> Problem | None:
    """`fields`: name → (the one JSON type the API takes, whether null is taken too). A field of another
    type is a 400 with code `invalid_type` (https://platform.openai.com/docs/guides/error-codes: 400
    "Invalid request": the parameters do not match the API reference's schema)."""
    for name, (expected, nullable) in fields.items():
        if name not in body or (body[name] is None and nullable):
            continue
        if _kind(body[name]) != expected and not (expected == "a decimal" and _kind(body[name]) == "an integer"):
            return Problem(f"Invalid type for '{name}': expected {expected}, but got {_kind(body[name])} instead.",
                           name, code="invalid_type")
    return None


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or () if isinstance(b, dict)] if isinstance(content, list) else []


# -- Anthropic Messages --

ANTHROPIC_ROLES = ("user", "assistant")
MAX_CACHE_BREAKPOINTS = 4


def anthropic_problem(body: dict[str, Any], betas: str | None = None) -> Problem | None:
    """The first rule of the Messages API `body` breaks, or None. `betas`: the request's
    `anthropic-beta` header (None: not known, the beta-gated rules are not checked)."""
    # https://platform.claude.com/docs/en/api/messages — `model`, `max_tokens` and `messages` are required.
    for required in ("model", "max_tokens", "messages"):
        if required not in body:
            return Problem(f"{required}: Field required", required)
    # (the same reference: `model` is a string; a value of another type is the API's 400, as pydantic words it)
    if not isinstance(body["model"], str):
        return Problem("model: Input should be a valid string", "model")
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return Problem("messages: at least one message is required", "messages")
    if problem := _tools_problem(body, "tools: Input should be a valid list of tool definitions"):
        return problem
    system = body.get("system")
    if system is not None and not isinstance(system, (str, list)):
        return Problem("system: Input should be a valid string or a list of text blocks", "system")
    for k, block in enumerate(_blocks(system) if isinstance(system, list) else ()):
        if block.get("type") != "text":
            return Problem(f"system.{k}.type: Input should be 'text'", "system")
        if not block.get("text"):
            return Problem("system: text content blocks must be non-empty", "system")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("role"), str) or m["role"] not in ANTHROPIC_ROLES:
            # The Messages API has no "system" role: the system prompt is the top-level `system`
            # parameter (https://platform.claude.com/docs/en/api/messages, `messages[].role`).
            role = m.get("role") if isinstance(m, dict) else None
            return Problem(f'messages.{i}.role: Unexpected role "{role}". The Messages API accepts a top-level '
                           '`system` parameter, not "system" as an input message role.', "messages")
        content = m.get("content")
        if not isinstance(content, (str, list)):
            return Problem(f"messages.{i}.content: Input should be a valid string or list", "messages")
        last_assistant = i == len(messages) - 1 and m["role"] == "assistant"
        if content in ("", []) and not last_assistant:
            return Problem(f"messages.{i}: all messages must have non-empty content except for the optional "
                           "final assistant message", "messages")
        for k, block in enumerate(_blocks(content)):
            if block.get("type") == "text" and not isinstance(block.get("text"), str):
                return Problem(f"messages.{i}.content.{k}.text: Input should be a valid string", "messages")
            if block.get("type") == "text" and not block.get("text"):
                return Problem(f"messages.{i}.content.{k}.text: text content blocks must be non-empty", "messages")
            for key in ("id", "tool_use_id"):
                if block.get("type") in ("tool_use", "tool_result") and key in block \
                        and not isinstance(block[key], str):
                    return Problem(f"messages.{i}.content.{k}.{key}: Input should be a valid string", "messages")
    return (_tool_pairing_problem(_merged(messages)) or _citations_problem(body)
            or _cache_control_problem(body) or _agent_params_problem(body, betas))


def _merged(messages: list[dict[str, Any]]) -> list[tuple[int, str, list[dict[str, Any]]]]:
    """Consecutive turns of one role are combined into one turn, as the API does
    (https://platform.claude.com/docs/en/api/messages: "consecutive user or assistant turns in
    your request will be combined into a single turn"). Keeps the first message's index."""
    out: list[tuple[int, str, list[dict[str, Any]]]] = []
    for i, m in enumerate(messages):
        if out and out[-1][1] == m["role"]:
            out[-1][2].extend(_blocks(m["content"]))
        else:
            out.append((i, m["role"], list(_blocks(m["content"]))))
    return out


def _tool_pairing_problem(turns: list[tuple[int, str, list[dict[str, Any]]]]) -> Problem | None:
    # https://platform.claude.com/docs/en/agents-and-tools/tool-use/handle-tool-calls — "Tool result
    # blocks must immediately follow their corresponding tool use blocks in the message history. You
    # cannot include any messages between the assistant's tool use message and the user's tool result
    # message. In the user message containing tool results, the tool_result blocks must come FIRST in
    # the content array. Any text must come AFTER all tool results." Breaking it is a 400.
    for n, (i, role, blocks) in enumerate(turns):
        if role != "assistant":
            continue
        uses = [b.get("id") for b in blocks if b.get("type") == "tool_use"]
        if not uses:
            continue
        following = turns[n + 1] if n + 1 < len(turns) else None
        if following is None:
            continue  # the conversation ends on the assistant's tool call: a prefill, not a loop step
        j, _, reply = following
        answered = {b.get("tool_use_id") for b in reply if b.get("type") == "tool_result"}
        missing = [u for u in uses if u not in answered]
        if missing:
            return Problem(f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately "
                           f"after: {', '.join(map(str, missing))}. Each `tool_use` block must have a "
                           "corresponding `tool_result` block in the next message.", "messages")
        seen_other = None
        for k, b in enumerate(reply):
            if b.get("type") == "tool_result":
                if seen_other is not None:
                    return Problem(f"messages.{j}.content.{k}: `tool_result` blocks must come first in the "
                                   f"content array of the user message that answers `tool_use` blocks; a "
                                   f"`{seen_other}` block comes before it. Any text must come after all tool "
                                   "results.", "messages")
            else:
                seen_other = b.get("type")
    previous: set[Any] = set()
    for i, role, blocks in turns:
        if role == "user":
            stray = [b.get("tool_use_id") for b in blocks
                     if b.get("type") == "tool_result" and b.get("tool_use_id") not in previous]
            if stray:
                return Problem(f"messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: "
                               f"{', '.join(map(str, stray))}. Each `tool_result` block must have a "
                               "corresponding `tool_use` block in the previous message.", "messages")
        previous = {b.get("id") for b in blocks if b.get("type") == "tool_use"} if role == "assistant" else set()
    return None


def _cited_sources(body: dict[str, Any]) -> list[tuple[str, bool]]:
    """(block type, citations enabled) of every search_result / document block, tool results included."""
    found: list[tuple[str, bool]] = []

    def walk(blocks: list[dict[str, Any]]) -> None:
        for b in blocks:
            if b.get("type") in ("search_result", "document"):
                found.append((b["type"], bool(_obj(b.get("citations")).get("enabled"))))
            elif b.get("type") == "tool_result" and isinstance(b.get("content"), list):
                walk(_blocks(b["content"]))

    for m in body.get("messages") or ():
        walk(_blocks(m.get("content")))
    return found


def _citations_problem(body: dict[str, Any]) -> Problem | None:
    sources = _cited_sources(body)
    results = {enabled for kind, enabled in sources if kind == "search_result"}
    if len(results) > 1:
        # https://platform.claude.com/docs/en/build-with-claude/search-results ("Citations
        # all-or-nothing"): either all search results in a request have citations enabled or all
        # have them disabled; mixing them is an error.
        return Problem("Mixing search results with citations enabled and disabled is not supported: "
                       "citations must be enabled for all search results in a request or for none.", "messages")
    structured = _obj(body.get("output_config")).get("format")
    if (structured or body.get("output_format")) and any(enabled for _, enabled in sources):
        # https://platform.claude.com/docs/en/build-with-claude/structured-outputs — structured
        # outputs are incompatible with citations; a request that enables both gets a 400.
        return Problem("Citations are not supported together with structured outputs (`output_config.format`). "
                       "Disable citations or remove the output format.", "output_config")
    return None


CONTEXT_EDITS = ("clear_tool_uses_20250919", "clear_thinking_20251015")


def _agent_params_problem(body: dict[str, Any], betas: str | None) -> Problem | None:
    """What coding agents such as Claude Code send beside the messages: `thinking`,
    `context_management` and `metadata`."""
    thinking = body.get("thinking")
    if thinking is not None:
        kind = _obj(thinking).get("type")
        if kind not in ("enabled", "disabled", "adaptive"):
            return Problem("thinking.type: Input should be 'enabled', 'disabled' or 'adaptive'", "thinking")
        budget = _obj(thinking).get("budget_tokens")
        # https://platform.claude.com/docs/en/build-with-claude/extended-thinking — "the minimum
        # budget is 1,024 tokens"; budget_tokens must be below max_tokens, except with interleaved
        # thinking (beta `interleaved-thinking-2025-05-14`), where it may reach the context window.
        if kind == "enabled":
            if not isinstance(budget, int) or budget < 1024:
                return Problem("thinking.enabled.budget_tokens: Input should be greater than or equal to 1024",
                               "thinking")
            interleaved = betas is None or "interleaved-thinking" in betas
            if not interleaved and isinstance(body.get("max_tokens"), int) and budget >= body["max_tokens"]:
                return Problem("`max_tokens` must be greater than `thinking.budget_tokens`.", "max_tokens")
        # Same page ("Feature compatibility"): thinking is not compatible with temperature or top_k
        # modifications.
        if kind in ("enabled", "adaptive") and (body.get("temperature", 1) != 1 or "top_k" in body):
            return Problem("`temperature` may only be set to 1 when thinking is enabled.", "temperature")
    management = body.get("context_management")
    if management is not None:
        # https://platform.claude.com/docs/en/build-with-claude/context-editing — beta
        # `context-management-2025-06-27`; `edits` are clear_tool_uses_20250919 and
        # clear_thinking_20251015, and clearing thinking needs thinking on.
        if betas is not None and "context-management-2025-06-27" not in betas:
            return Problem("context_management: Extra inputs are not permitted (requires the "
                           "`context-management-2025-06-27` beta)", "context_management")
        edits = _obj(management).get("edits")
        if not isinstance(edits, list):
            return Problem("context_management.edits: Input should be a valid list", "context_management")
        for k, edit in enumerate(edits):
            kind = _obj(edit).get("type")
            if kind not in CONTEXT_EDITS:
                return Problem(f"context_management.edits.{k}.type: Input tag '{kind}' found using 'type' does not "
                               f"match any of the expected tags: {', '.join(map(repr, CONTEXT_EDITS))}",
                               "context_management")
            if kind == "clear_thinking_20251015" and _obj(thinking).get("type") not in ("enabled", "adaptive"):
                return Problem("context_management.edits.clear_thinking_20251015 requires thinking to be enabled",
                               "context_management")
    metadata = body.get("metadata")
    if metadata is not None:
        # https://platform.claude.com/docs/en/api/messages — `metadata` has one field, `user_id`
        # (a string of at most 256 characters); anything else is an extra input (400).
        extra = [k for k in _obj(metadata) if k != "user_id"] if isinstance(metadata, dict) else ["(not an object)"]
        if extra:
            return Problem(f"metadata.{extra[0]}: Extra inputs are not permitted", "metadata")
        user_id = metadata.get("user_id")
        if user_id is not None and not (isinstance(user_id, str) and len(user_id) <= 256):
            return Problem("metadata.user_id: String should have at most 256 characters", "metadata")
    return None


def _cache_control_problem(body: dict[str, Any]) -> Problem | None:
    # https://platform.claude.com/docs/en/build-with-claude/prompt-caching — "You can define up to 4
    # cache breakpoints"; a fifth `cache_control` is a 400.
    found = sum(1 for b in cache_blocks(body) if b.get("cache_control")) + bool(body.get("cache_control"))
    if found > MAX_CACHE_BREAKPOINTS:
        return Problem(f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
                       f"Found {found}.", "messages")
    return None


def cache_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    """The prompt's blocks in cache order: tools, then system, then messages
    (https://platform.claude.com/docs/en/build-with-claude/prompt-caching, "Cache prefixes are
    created in the following order: tools, system, then messages")."""
    out = [t for t in body.get("tools") or () if isinstance(t, dict)]
    system = body.get("system")
    if system:
        out.extend(_blocks(system))
    for m in body.get("messages") or ():
        if isinstance(m, dict):
            out.extend(_blocks(m.get("content")))
    return out


# -- OpenAI Chat Completions --

CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


def chat_problem(body: dict[str, Any]) -> Problem | None:
    # https://platform.openai.com/docs/api-reference/chat/create — `model` and `messages` are required.
    for required in ("model", "messages"):
        if required not in body:
            return Problem(f"Missing required parameter: '{required}'.", required)
    # (the same reference: `model` a string, `n` an integer or null, `stream_options` an object or null)
    if problem := _openai_types_problem(body, {"model": ("a string", False), "n": ("an integer", True),
                                               "stream_options": ("an object", True)}):
        return problem
    if problem := _tools_problem(body, "Invalid type for 'tools': expected an array of objects."):
        return problem
    messages = body["messages"]
    if not isinstance(messages, list) or not messages:
        return Problem("Invalid 'messages': empty array. Expected an array with minimum length 1, but got an "
                       "empty array instead.", "messages")
    pending: list[str] = []
    pending_at = 0
    for i, m in enumerate(messages):
        role = m.get("role") if isinstance(m, dict) else None
        if not isinstance(role, str) or role not in CHAT_ROLES:
            return Problem(f"Invalid value: '{role}'. Supported values are: 'system', 'assistant', 'user', "
                           "'function', 'tool', and 'developer'.", f"messages[{i}].role")
        # https://platform.openai.com/docs/guides/function-calling — the results of an assistant's
        # tool calls are `tool` messages that follow it, one per `tool_call_id`; the API answers
        # 400 when any other message comes between the call and its results.
        if pending:
            if role == "tool" and m.get("tool_call_id") in pending:
                pending.remove(m["tool_call_id"])
                continue
            if role == "tool":
                return Problem(f"Invalid parameter: 'tool_call_id' of '{m.get('tool_call_id')}' not found in "
                               "'tool_calls' of previous message.", f"messages.[{i}].tool_call_id")
            return Problem("An assistant message with 'tool_calls' must be followed by tool messages responding "
                           "to each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                           + ", ".join(pending), f"messages.[{pending_at}].role")
        if role == "tool":
            return Problem("Invalid parameter: messages with role 'tool' must be a response to a preceeding "
                           "message with 'tool_calls'.", f"messages.[{i}].role")
        if role == "assistant" and m.get("tool_calls"):
            calls = m["tool_calls"] if isinstance(m["tool_calls"], list) else [None]
            if not all(isinstance(c, dict) and isinstance(c.get("id"), str) for c in calls):
                return Problem("Invalid 'tool_calls': each must be an object with a string 'id'.",
                               f"messages.[{i}].tool_calls")
            pending = [c["id"] for c in calls]
            pending_at = i
    if pending:
        return Problem("An assistant message with 'tool_calls' must be followed by tool messages responding to "
                       "each 'tool_call_id'. The following tool_call_ids did not have response messages: "
                       + ", ".join(pending), f"messages.[{pending_at}].role")
    return None


# -- OpenAI Responses --

RESPONSES_ROLES = ("user", "assistant", "system", "developer")


def input_items(inp: Any) -> list[dict[str, Any]]:
    """`input` as a list of items (a string is one user message)."""
    if isinstance(inp, str):
        return [{"type": "message", "role": "user", "content": inp}]
    return [x for x in inp if isinstance(x, dict)] if isinstance(inp, list) else []


def conversation_id(body: dict[str, Any]) -> str | None:
    """The Responses `conversation`: an id, or an object with one (API reference)."""
    conv = body.get("conversation")
    if isinstance(conv, dict):
        conv = conv.get("id")
    return conv if isinstance(conv, str) and conv else None


def responses_problem(body: dict[str, Any],
                      stored: Callable[[str], list[dict[str, Any]] | None]) -> Problem | None:
    """`stored(previous_response_id)` gives the stored conversation (input and output items) or None."""
    # https://platform.openai.com/docs/api-reference/responses/create
    if "model" not in body:
        return Problem("Missing required parameter: 'model'.", "model")
    if problem := _openai_types_problem(body, {"model": ("a string", False)}):  # (the same reference)
        return problem
    inp = body.get("input")
    if inp is not None and not isinstance(inp, (str, list)):
        return Problem("Invalid type for 'input': expected a string or an array of input items.", "input")
    if problem := _tools_problem(body, "Invalid type for 'tools': expected an array of objects."):
        return problem
    if body.get("instructions") is not None and not isinstance(body["instructions"], str):
        return Problem("Invalid type for 'instructions': expected a string.", "instructions")
    if problem := _responses_agent_problem(body):
        return problem
    context: list[dict[str, Any]] = []
    prev = body.get("previous_response_id")
    if prev is not None and not isinstance(prev, str):
        return Problem("Invalid type for 'previous_response_id': expected a string.", "previous_response_id")
    if prev is not None:
        found = stored(prev)
        if found is None:
            return Problem(f"Previous response with id '{prev}' not found.", "previous_response_id")
        context = list(found)
    conversation = conversation_id(body)
    if conversation and prev is not None:  # API reference, `conversation`: "Cannot be used in conjunction with `previous_response_id`."
        return Problem("Mutually exclusive parameters: Ensure you are only providing one of: 'previous_response_id' "
                       "or 'conversation'.", "conversation")
    if conversation:  # its items are prepended to this request's input
        context = list(stored(f"conversation:{conversation}") or [])
    new = input_items(inp)
    for k, item in enumerate(new):
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") not in RESPONSES_ROLES:
            return Problem(f"Invalid value: '{item.get('role')}'. Supported values are: 'assistant', 'system', "
                           "'developer', and 'user'.", f"input[{k}].role")
    # https://platform.openai.com/docs/guides/function-calling and .../guides/conversation-state: a
    # `function_call_output` answers a `function_call` (by `call_id`) that comes before it, in this
    # input or in the conversation `previous_response_id` continues; and every function call the
    # model made must get its output before the conversation goes on.
    calls: dict[str, bool] = {}
    for k, item in enumerate(context + new):
        kind = item.get("type")
        if kind in ("function_call", "function_call_output") and not isinstance(item.get("call_id"), str):
            return Problem("Invalid type for 'call_id': expected a string.", f"input[{k}].call_id")
        if kind == "function_call":
            calls[item.get("call_id")] = False
        elif kind == "function_call_output":
            if item.get("call_id") not in calls:
                return Problem(f"No tool call found for function call output with call_id {item.get('call_id')}.",
                               "input")
            calls[item["call_id"]] = True
    unanswered = [c for c, done in calls.items() if not done]
    if unanswered:
        return Problem(f"No tool output found for function call {unanswered[0]}.", "input")
    return None


# https://platform.openai.com/docs/api-reference/responses/create — `include`'s documented values.
RESPONSES_INCLUDES = ("web_search_call.action.sources", "code_interpreter_call.outputs",
                      "computer_call_output.output.image_url", "file_search_call.results",
                      "message.input_image.image_url", "message.output_text.logprobs", "reasoning.encrypted_content")
# The same reference, `tools`: the built-in tool types, function tools, custom tools and (as Codex
# sends) a `namespace` grouping function tools under one name.
RESPONSES_TOOL_TYPES = ("function", "custom", "namespace", "web_search", "web_search_preview",
                        "web_search_2025_08_26", "file_search", "computer_use_preview", "code_interpreter",
                        "image_generation", "local_shell", "mcp", "shell", "apply_patch", "tool_search")


def _responses_agent_problem(body: dict[str, Any]) -> Problem | None:
    """What coding agents such as Codex send beside the input: `include`, `prompt_cache_key`,
    `client_metadata`, namespaced and built-in tools."""
    include = body.get("include")
    if include is not None:
        if not isinstance(include, list):
            return Problem("Invalid type for 'include': expected an array of strings.", "include")
        for k, value in enumerate(include):
            if value not in RESPONSES_INCLUDES:
                return Problem(f"Invalid value: '{value}'. Supported values are: "
                               + ", ".join(f"'{v}'" for v in RESPONSES_INCLUDES) + ".", f"include[{k}]")
    key = body.get("prompt_cache_key")
    if key is not None and not isinstance(key, str):
        return Problem("Invalid type for 'prompt_cache_key': expected a string.", "prompt_cache_key")
    for name in ("metadata", "client_metadata"):
        meta = body.get(name)
        if meta is not None and not (isinstance(meta, dict) and all(isinstance(v, str) for v in meta.values())):
            return Problem(f"Invalid type for '{name}': expected an object with string values.", name)
    for k, tool in enumerate(body.get("tools") or ()):
        kind = tool.get("type", "function")
        if kind not in RESPONSES_TOOL_TYPES:
            return Problem(f"Invalid value: '{kind}'. Supported values are: "
                           + ", ".join(f"'{v}'" for v in RESPONSES_TOOL_TYPES) + ".", f"tools[{k}].type")
        if kind in ("function", "namespace") and not isinstance(tool.get("name"), str):
            return Problem(f"Missing required parameter: 'tools[{k}].name'.", f"tools[{k}].name")
        if kind == "namespace":
            inner = tool.get("tools")
            if not isinstance(inner, list) or not all(isinstance(t, dict) and t.get("type", "function") == "function"
                                                      for t in inner):
                return Problem(f"Invalid 'tools[{k}].tools': a namespace groups function tools.", f"tools[{k}].tools")
    return None
