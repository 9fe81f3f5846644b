"""`store_memory` calls in a whole (non-streamed) answer, per wire format: find them, remove them
from what the agent receives, and build the follow-up request that answers them.

The follow-up repeats the request with the model's turn and the tool results appended, the way
each API documents a tool round trip: Chat Completions an assistant message with `tool_calls`
then one `tool` message per call id; Responses the answer's output items then one
`function_call_output` per `call_id`; Messages the assistant `content` then a user message whose
`tool_result` blocks come first (formats/rules.py).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import orjson

from .offer import TOOL_NAME


@dataclass
class Call:
    id: str
    arguments: Any  # the parsed arguments, or the raw text when it is not a JSON object


def _args(raw: Any) -> Any:
    if isinstance(raw, dict):
        return raw
    if isinstance(raw, str):
        try:
            parsed = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw
        return parsed
    return raw


def calls(fmt: str, doc: dict[str, Any]) -> tuple[list[Call], int]:
    """The answer's store_memory calls, and how many other tool calls it holds."""
    mine: list[Call] = []
    others = 0
    if fmt == "openai":
        choices = doc.get("choices") if isinstance(doc.get("choices"), list) else []
        message = (choices[0] or {}).get("message") if choices and isinstance(choices[0], dict) else None
        for c in (message or {}).get("tool_calls") or ():
            fn = c.get("function") if isinstance(c, dict) else None
            if isinstance(fn, dict) and fn.get("name") == TOOL_NAME and isinstance(c.get("id"), str):
                mine.append(Call(c["id"], _args(fn.get("arguments"))))
            else:
                others += 1
    elif fmt == "responses":
        for item in doc.get("output") or ():
            if not isinstance(item, dict) or not str(item.get("type", "")).endswith("_call"):
                continue
            if item.get("type") == "function_call" and item.get("name") == TOOL_NAME \
                    and isinstance(item.get("call_id"), str):
                mine.append(Call(item["call_id"], _args(item.get("arguments"))))
            else:
                others += 1
    else:
        for block in doc.get("content") or ():
            if not isinstance(block, dict) or block.get("type") not in ("tool_use", "server_tool_use"):
                continue
            if block.get("type") == "tool_use" and block.get("name") == TOOL_NAME and isinstance(block.get("id"), str):
                mine.append(Call(block["id"], _args(block.get("input"))))
            else:
                others += 1
    return mine, others


def without_calls(fmt: str, doc: dict[str, Any]) -> dict[str, Any]:
    """The answer as the agent receives it: the store_memory calls removed, the rest as it was."""
    doc = copy.deepcopy(doc)
    if fmt == "openai":
        message = doc["choices"][0]["message"]
        kept = [c for c in message.get("tool_calls") or ()
                if not ((c.get("function") or {}).get("name") == TOOL_NAME)]
        if kept:
            message["tool_calls"] = kept
        else:
            message.pop("tool_calls", None)
            if doc["choices"][0].get("finish_reason") == "tool_calls":
                doc["choices"][0]["finish_reason"] = "stop"
    elif fmt == "responses":
        doc["output"] = [i for i in doc.get("output") or ()
                         if not (isinstance(i, dict) and i.get("type") == "function_call" and i.get("name") == TOOL_NAME)]
    else:
        doc["content"] = [b for b in doc.get("content") or ()
                          if not (isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") == TOOL_NAME)]
        if doc.get("stop_reason") == "tool_use" and not any(
                isinstance(b, dict) and b.get("type") in ("tool_use", "server_tool_use") for b in doc["content"]):
            doc["stop_reason"] = "end_turn"
    return doc


def hide_tool(fmt: str, doc: dict[str, Any]) -> dict[str, Any]:
    """A Responses answer echoes the request's `tools`: the agent sees its own, not memplane's."""
    tools = doc.get("tools")
    if fmt != "responses" or not isinstance(tools, list):
        return doc
    kept = [t for t in tools if not (isinstance(t, dict) and t.get("name") == TOOL_NAME)]
    return doc if len(kept) == len(tools) else {**doc, "tools": kept}


def follow_up(fmt: str, body: dict[str, Any], doc: dict[str, Any], results: dict[str, tuple[bool, str]]
              ) -> dict[str, Any]:
    """The request that hands the tool results back: `results` is call id → (ok, text)."""
    if fmt == "openai":
        message = {k: v for k, v in doc["choices"][0]["message"].items() if k in ("role", "content", "tool_calls")}
        message.setdefault("role", "assistant")
        answers = [{"role": "tool", "tool_call_id": cid, "content": text} for cid, (_, text) in results.items()]
        return {**body, "messages": [*body["messages"], message, *answers]}
    if fmt == "responses":
        inp = body["input"]
        items = [{"role": "user", "content": inp}] if isinstance(inp, str) else list(inp)
        outputs = [{"type": "function_call_output", "call_id": cid, "output": text}
                   for cid, (_, text) in results.items()]
        return {**body, "input": [*items, *(doc.get("output") or []), *outputs]}
    blocks = [{"type": "tool_result", "tool_use_id": cid, "content": text, **({} if ok else {"is_error": True})}
              for cid, (ok, text) in results.items()]
    return {**body, "messages": [*body["messages"], {"role": "assistant", "content": doc.get("content") or []},
                                 {"role": "user", "content": blocks}]}


def summed_usage(usages: list[Any]) -> Any:
    """Every provider call's usage added up, field by field (nested counts too)."""
    present = [u for u in usages if isinstance(u, dict)]
    if not present:
        return usages[-1] if usages else None

    def add(a: Any, b: Any) -> Any:
        if isinstance(a, bool) or isinstance(b, bool):
            return b
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return a + b
        if isinstance(a, dict) and isinstance(b, dict):
            return {k: add(a[k], b[k]) if k in a and k in b else b.get(k, a.get(k)) for k in {**a, **b}}
        return b if b is not None else a

    total = present[0]
    for u in present[1:]:
        total = add(total, u)
    return total
