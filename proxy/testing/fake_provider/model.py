"""The fake provider's "model": a scriptable policy that drives real client tool loops.

Every wire format is read into one `View` (the tools on offer, the tool results that came back
since the user last spoke, the whole body); a model answers a view with an `Answer` (text, tool
calls, or both). The default model calls the first tool once and then answers from memory, which
is what the existing tests expect; `ToolLoop` scripts "call tool X first, then Y, then answer from
the results".
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

MEMORIES_RE = re.compile(r"<memories\b[^>]*>.*?</memories>", re.S)  # kept for importers; see _elements


def _unescaped(body: Any) -> str:
    return orjson.dumps(body).decode().replace("\\n", "\n").replace('\\"', '"')


def _elements(text: str, tag: str) -> list[str]:
    """Every `<tag ...>…</tag>` in `text`, found with str.find: linear on any input, where a lazy
    regex rescans to the end from each unclosed opening (quadratic on a hostile body)."""
    found, pos, close = [], 0, f"</{tag}>"
    while True:
        start = text.find(f"<{tag}", pos)
        if start < 0:
            return found
        after = text[start + len(tag) + 1:start + len(tag) + 2]
        if after and not (after.isspace() or after in ">/"):
            pos = start + 1  # <memoriesX…: another tag
            continue
        end = text.find(close, start)
        if end < 0:
            return found  # no closing tag after this opening, so none after any later one
        found.append(text[start:end + len(close)])
        pos = end + len(close)


def memory_blocks(body: Any) -> list[str]:
    """Every `<memories>` block anywhere in a request (or list of items)."""
    return _elements(_unescaped(body), "memories")


def _first_search_result_text(node: Any) -> str | None:
    if isinstance(node, dict):
        if node.get("type") == "search_result":
            for part in node.get("content") or ():
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    return part["text"]
        node = list(node.values())
    if isinstance(node, list):
        for item in node:
            found = _first_search_result_text(item)
            if found is not None:
                return found
    return None


def default_reply(body: dict[str, Any]) -> str:
    """The first remembered fact the request carries (a search result's text, or the first
    `<memory>` of a `<memories>` block), else "Noted."."""
    result = _first_search_result_text(body)
    if result is not None:
        return f"From memory: {result}"
    for block in memory_blocks(body):
        for memory in _elements(block, "memory"):
            return f"From memory: {memory[memory.index('>') + 1:-len('</memory>')]}"
    return "Noted."


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class Answer:
    text: str = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    # what the provider ran itself before answering, as its answer carries it, first: Anthropic server
    # tool blocks (`server_tool_use` and its `web_fetch_tool_result`, …), Responses hosted-tool items
    # (`web_search_call`, `file_search_call`, `mcp_call`, …), Chat `annotations` (`url_citation`)
    ran: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class View:
    """What the model sees of one request, whatever its wire format."""

    body: dict[str, Any]  # for Responses continuations: the body with the stored conversation replayed
    tools: list[str]  # names of the tools on offer
    steps: int  # tool-call rounds since the user's latest message
    tool_results: list[str]  # texts of the tool results since the user's latest message
    user_text: str  # the user's latest message


Model = Callable[[View], Answer]


def default_model(reply: Callable[[dict[str, Any]], str]) -> Model:
    def model(view: View) -> Answer:
        if view.tools and view.steps == 0:
            return Answer(tool_calls=[ToolCall(view.tools[0], {"city": "Lisbon"})])
        return Answer(text=reply(view.body))
    return model


@dataclass
class ToolLoop:
    """A scripted tool loop: one tool call per step, in order, then a final answer.

    The final answer is `reply(body)` (by default: the first remembered fact) followed by the last
    tool result, so a test sees whether both memory and the tools reached the model. `say` is text
    the model writes before each tool call (as models often do: "Let me check.")."""

    calls: list[ToolCall | list[ToolCall]]  # a list in the list: parallel calls in one step
    reply: Callable[[dict[str, Any]], str] = default_reply
    say: str = ""

    def __call__(self, view: View) -> Answer:
        if view.steps < len(self.calls):
            step = self.calls[view.steps]
            return Answer(text=self.say, tool_calls=list(step) if isinstance(step, list) else [step])
        text = self.reply(view.body)
        if view.tool_results:
            text += f" Tool said: {' / '.join(view.tool_results[-len(self._last()):])}"
        return Answer(text=text)

    def _last(self) -> list[ToolCall]:
        step = self.calls[-1] if self.calls else []
        return list(step) if isinstance(step, list) else [step]


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        out = []
        for part in content:
            if isinstance(part, str):
                out.append(part)
            elif isinstance(part, dict):
                if isinstance(part.get("text"), str):
                    out.append(part["text"])
                elif part.get("type") == "tool_result":
                    out.append(_text_of(part.get("content")))
        return "\n".join(out)
    return ""


def _is_memory(text: Any) -> bool:
    return isinstance(text, str) and text.lstrip().startswith("<memories")


def chat_view(body: dict[str, Any]) -> View:
    messages = [m for m in body.get("messages") or () if isinstance(m, dict)]
    steps, results, user = 0, [], ""
    for m in messages:
        role = m.get("role")
        if role == "user" and not _is_memory(_text_of(m.get("content"))):
            steps, results, user = 0, [], _text_of(m.get("content"))
        elif role == "assistant" and m.get("tool_calls"):
            steps += 1
        elif role == "tool":
            results.append(_text_of(m.get("content")))
    tools = [(t.get("function") or {}).get("name", "tool") for t in body.get("tools") or () if isinstance(t, dict)]
    return View(body, tools, steps, results, user)


def anthropic_view(body: dict[str, Any]) -> View:
    steps, results, user = 0, [], ""
    for m in body.get("messages") or ():
        if not isinstance(m, dict):
            continue
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else \
            [b for b in content or () if isinstance(b, dict)]
        if m.get("role") == "assistant":
            steps += any(b.get("type") == "tool_use" for b in blocks)
            continue
        answered = [b for b in blocks if b.get("type") == "tool_result"]
        if answered:
            results += [_text_of(b.get("content")) for b in answered]
            continue
        said = "\n".join(b["text"] for b in blocks
                         if b.get("type") == "text" and isinstance(b.get("text"), str) and not _is_memory(b["text"]))
        if said:
            steps, results, user = 0, [], said
    tools = [t.get("name", "tool") for t in body.get("tools") or () if isinstance(t, dict)]
    return View(body, tools, steps, results, user)


def responses_view(body: dict[str, Any], items: list[dict[str, Any]]) -> View:
    """`items` is the whole conversation: stored items of the chain, then this request's input."""
    steps, results, user = 0, [], ""
    calls_seen = False
    for item in items:
        kind = item.get("type", "message")
        if kind == "message" and item.get("role") == "user" and not _is_memory(_text_of(item.get("content"))):
            steps, results, user, calls_seen = 0, [], _text_of(item.get("content")), False
        elif kind == "function_call":
            if not calls_seen:
                steps += 1
            calls_seen = True
        elif kind == "function_call_output":
            results.append(str(item.get("output")))
            calls_seen = False
    tools = [t.get("name", "tool") for t in body.get("tools") or ()
             if isinstance(t, dict) and t.get("type", "function") == "function"]
    return View({**body, "input": items}, tools, steps, results, user)
