"""The providers' ordering and citation rules, in one place every wire format places the block by.

Whatever the placement, the forwarded request must be one the real API accepts:

* Anthropic: in a user message answering tool calls, every `tool_result` block comes first; text
  may follow them (docs: "Tool use" → "Handle tool calls": "tool result blocks must come first in
  the content array; any text must come after all tool results").
* Anthropic, extended thinking in tool loops: "Cache remains valid when only tool results are
  provided as user messages. Cache gets invalidated when non-tool-result user content is added,
  causing all previous thinking blocks to be stripped" (docs: "Prompt caching" → "Caching with
  thinking blocks"). So with thinking a loop's later steps never get the block beside their tool
  results: it stays in the question's message, where the turn's first call put it
  (`anthropic_messages.inject`). Without thinking, `trailing` goes after the step's tool results
  (text after them is valid, see above): behind the client's breakpoint, where the next step and
  the next user turn find everything the step cached.
* OpenAI Chat Completions: an assistant message with `tool_calls` must be followed by the `tool`
  message answering each call id before any other message (API reference, `messages`; otherwise
  400 "An assistant message with 'tool_calls' must be followed by tool messages responding to each
  'tool_call_id'").
* OpenAI Responses: nothing between a `function_call` item and its `function_call_output`, and a
  `reasoning` item stays directly in front of the item it produced (reasoning guide, "keeping
  reasoning items in context").
* Anthropic search results: citations are all-or-nothing across a request's `search_result`
  blocks, and citations cannot be combined with structured output (`output_config.format`)
  (docs: "Search results" and "Citations").

A placement that would break one of these moves to the nearest place that does not, or falls back
to a text block; the reason is returned so the turn's explanation can say so.
"""

from __future__ import annotations

from typing import Any

_CALL_OUTPUTS = {"function_call": "function_call_output", "custom_tool_call": "custom_tool_call_output",
                 "local_shell_call": "local_shell_call_output", "computer_call": "computer_call_output"}


def after_tool_results(content: list[Any]) -> int:
    """Where text may go first in an Anthropic user message: after its leading `tool_result` blocks."""
    i = 0
    while i < len(content) and isinstance(content[i], dict) and content[i].get("type") == "tool_result":
        i += 1
    return i


def pin_automatic_breakpoint(body: dict[str, Any], parts: list[Any]) -> tuple[dict[str, Any], list[Any]]:
    """Automatic caching (a top-level `cache_control`) puts the breakpoint on the request's last
    block (docs: "Prompt caching" → "Automatic caching"), which after a trailing block would be
    memplane's: every cache entry would hold a block the next call no longer has, and nothing would
    ever hit. The same breakpoint is set explicitly on the client's own last block instead — what
    the API would have chosen without memplane — and the top-level field dropped (one breakpoint
    either way, so never a fifth). `parts` is the newest message's content, the request's end."""
    auto = body.get("cache_control")
    if not auto:
        return body, parts
    parts = list(parts)
    if parts and isinstance(parts[-1], dict) and not parts[-1].get("cache_control"):
        parts[-1] = {**parts[-1], "cache_control": auto}
    return {k: v for k, v in body.items() if k != "cache_control"}, parts


def thinks(body: dict[str, Any]) -> bool:
    """Extended thinking is on (`thinking` other than disabled) or the history carries thinking
    blocks: a tool loop's tool results must then go alone (above)."""
    thinking = body.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") not in (None, "disabled"):
        return True
    return any(b.get("type") in ("thinking", "redacted_thinking") for b in _blocks(body.get("messages") or []))


def _forbidden_chat(messages: list[Any]) -> set[int]:
    """Indexes an inserted message may not take: those between tool calls and their last answer."""
    bad: set[int] = set()
    for p, m in enumerate(messages):
        if not (isinstance(m, dict) and m.get("role") == "assistant" and m.get("tool_calls")):
            continue
        q = p + 1
        while q < len(messages) and isinstance(messages[q], dict) and messages[q].get("role") == "tool":
            q += 1
        bad.update(range(p + 1, q))  # inserting at p+1..q-1 would split the calls from their answers
    return bad


def _forbidden_items(items: list[Any]) -> set[int]:
    bad: set[int] = set()
    where = {}
    for p, it in enumerate(items):
        if not isinstance(it, dict):
            continue
        kind = it.get("type")
        if kind in _CALL_OUTPUTS and it.get("call_id"):
            where[(_CALL_OUTPUTS[kind], it["call_id"])] = p
        elif (kind, it.get("call_id")) in where:
            bad.update(range(where.pop((kind, it.get("call_id"))) + 1, p + 1))
        if kind == "reasoning":
            bad.add(p + 1)
    return bad


def safe_chat_index(messages: list[Any], wanted: int) -> int:
    """The first index at or after `wanted` where a new chat message splits no tool call from its answer."""
    bad = _forbidden_chat(messages)
    while wanted in bad:
        wanted += 1
    return wanted


def safe_item_index(items: list[Any], wanted: int) -> int:
    """Likewise for Responses input items (function calls and their outputs, reasoning items)."""
    bad = _forbidden_items(items)
    while wanted in bad and wanted < len(items):
        wanted += 1
    return wanted


def _blocks(messages: list[Any]):
    for m in messages:
        content = m.get("content") if isinstance(m, dict) else None
        for block in content if isinstance(content, list) else ():
            if isinstance(block, dict):
                yield block
                if block.get("type") == "tool_result" and isinstance(block.get("content"), list):
                    yield from (b for b in block["content"] if isinstance(b, dict))


def own_citation_setting(body: dict[str, Any]) -> bool | None:
    """Whether the request's own `search_result` blocks have citations on (None: it sends none)."""
    settings = {bool((b.get("citations") or {}).get("enabled")) for b in _blocks(body.get("messages") or [])
                if b.get("type") == "search_result"}
    if not settings:
        return None
    return settings.pop() if len(settings) == 1 else False


def wants_structured_output(body: dict[str, Any]) -> bool:
    """Structured output asked for (Anthropic `output_config.format` or the beta `output_format`, or an
    OpenAI-style `response_format`)."""
    config = body.get("output_config")
    return (bool(isinstance(config, dict) and config.get("format")) or bool(body.get("output_format"))
            or bool(body.get("response_format")))


def search_results_fallback(body: dict[str, Any]) -> tuple[bool, str | None]:
    """(citations on, why not) for memplane's `search_result` blocks in this request; a reason
    means the block goes in as text instead."""
    if wants_structured_output(body):
        return False, "search_results → latest: the request asks for structured output, which citations cannot go with"
    own = own_citation_setting(body)
    if own is False:
        return False, "search_results → latest: the agent's own search results have citations off (all-or-nothing)"
    return True, None


def responses_input_is_stored(body: dict[str, Any]) -> bool:
    """A Responses input item stays in the provider's stored conversation unless `store` is false:
    a later `previous_response_id` or `conversation` call would carry it (and pile blocks up)."""
    return body.get("store") is not False or body.get("conversation") is not None
