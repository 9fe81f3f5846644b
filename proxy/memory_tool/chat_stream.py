"""Streamed Chat Completions with `store_memory`: text deltas go to the agent as they arrive, the
deltas of store_memory calls are held back, and so are the stream's last chunks (finish_reason,
usage, `[DONE]`) until memplane knows how the answer ends.

Only store_memory calls → memplane stores, asks the provider again (streaming) with the results,
and the new stream's chunks continue the same stream to the agent (at most MAX_EXTRA_CALLS more
calls); the usage chunk, when the agent asked for one, sums every call's. Mixed with the agent's
own calls → memplane stores, and the agent's calls are relayed renumbered from index 0 (the
agent's SDK assembles calls by index), ending with `finish_reason: tool_calls` as they did.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from ..formats.base import event_json, usage_counts
from ..sse import SSESplitter, parse_event
from ..transport_errors import TransportError, transport_errors
from .answers import follow_up, summed_usage
from .offer import TOOL_NAME
from .write import store

MAX_EXTRA_CALLS = 3


def _sse(doc: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(doc) + b"\n\n"


@dataclass
class Round:
    """One provider stream: what went to the agent, what was held back."""

    stored: dict[int, dict[str, str]] = field(default_factory=dict)  # call index → id, arguments
    others: dict[int, int] = field(default_factory=dict)  # the agent's calls: upstream index → index it sees
    text: list[str] = field(default_factory=list)
    finish: dict[str, Any] | None = None  # the chunk with finish_reason
    usage_chunk: dict[str, Any] | None = None
    done: bytes | None = None
    raw: list[bytes] = field(default_factory=list)

    def take(self, raw: bytes) -> bytes | None:
        """The bytes the agent gets for one upstream event (None: held back or nothing left)."""
        _, data = parse_event(raw)
        if data == "[DONE]":
            self.done = raw
            return None
        doc = event_json(data)
        if doc is None:
            return raw
        choices = doc.get("choices") if isinstance(doc.get("choices"), list) else []
        if not choices and doc.get("usage") is not None:
            self.usage_chunk = doc
            return None
        changed, kept = False, []
        for ch in choices:
            if not isinstance(ch, dict):
                kept.append(ch)
                continue
            delta = ch.get("delta") if isinstance(ch.get("delta"), dict) else {}
            if ch.get("index", 0) == 0:
                if isinstance(delta.get("content"), str):
                    self.text.append(delta["content"])
                if delta.get("tool_calls"):
                    delta, changed = self._calls(delta), True
            if ch.get("finish_reason"):
                self.finish = {**doc, "choices": [{**ch, "delta": delta}]}
                changed = True
                continue
            if changed and not delta:  # it held only store_memory call deltas
                continue
            kept.append({**ch, "delta": delta} if changed else ch)
        if doc.get("usage") is not None:
            self.usage_chunk = {**doc, "choices": []}
        if not changed:
            return raw
        if not kept:
            return None
        return _sse({**doc, "choices": kept})

    def _calls(self, delta: dict[str, Any]) -> dict[str, Any]:
        kept = []
        for c in delta["tool_calls"]:
            if not isinstance(c, dict):
                continue
            idx = c.get("index", 0)
            fn = c.get("function") if isinstance(c.get("function"), dict) else {}
            if idx not in self.stored and idx not in self.others:
                if fn.get("name") == TOOL_NAME:
                    self.stored[idx] = {"id": "", "arguments": ""}
                else:
                    self.others[idx] = len(self.others)
            if idx in self.stored:
                slot = self.stored[idx]
                slot["id"] = c.get("id") or slot["id"]
                slot["arguments"] += fn.get("arguments") or ""
            else:
                kept.append({**c, "index": self.others[idx]})
        rest = {k: v for k, v in delta.items() if k != "tool_calls"}
        return {**rest, "tool_calls": kept} if kept else rest

    def assistant_message(self) -> dict[str, Any]:
        return {"choices": [{"message": {
            "role": "assistant", "content": "".join(self.text) or None,
            "tool_calls": [{"id": s["id"], "type": "function", "function": {"name": TOOL_NAME, "arguments": s["arguments"]}}
                           for s in self.stored.values()]}}]}


async def relay_chat_stream(*, request: web.Request, state: Any, ctx: Any, body: dict[str, Any],
                            upstream: aiohttp.ClientResponse, headers: dict[str, str], hidden_usage: bool,
                            reopen: Callable[[dict[str, Any]], Any],
                            finish: Callable[[dict[str, Any]], Awaitable[None]],
                            stream_record: Callable[[list[bytes], str | None], dict[str, Any]],
                            session_id: str | None, turn_id: str) -> web.StreamResponse:
    resp = web.StreamResponse(status=upstream.status, headers=headers)
    resp.headers["Cache-Control"] = "no-cache"
    await resp.prepare(request)
    written: list[bytes] = []
    rounds: list[Round] = []
    incomplete = note = None

    async def send(data: bytes) -> None:
        written.append(data)
        await resp.write(data)

    async def run(source: aiohttp.ClientResponse) -> Round:
        rnd, splitter = Round(), SSESplitter()
        rounds.append(rnd)
        async for chunk in source.content.iter_any():
            rnd.raw.append(chunk)
            out = [b for raw in splitter.feed(chunk) if (b := rnd.take(raw)) is not None]
            if out:
                await send(b"".join(out))
        if tail := splitter.flush():
            if (b := rnd.take(tail + b"\n\n")) is not None:
                await send(b)
        return rnd

    try:
        rnd = await run(upstream)
        for extra in range(MAX_EXTRA_CALLS + 1):
            if not rnd.stored:
                break
            results = {}
            for slot in rnd.stored.values():
                try:
                    args = orjson.loads(slot["arguments"] or "{}")
                except orjson.JSONDecodeError:
                    args = slot["arguments"]
                results[slot["id"]] = await store(state, ctx, session_id, turn_id, args)
            if rnd.others or extra == MAX_EXTRA_CALLS:
                note = None if rnd.others else f"stopped after {MAX_EXTRA_CALLS} extra provider calls"
                break
            body = follow_up("openai", body, rnd.assistant_message(), results)
            try:
                with transport_errors():
                    async with await reopen(body) as again:
                        if not (200 <= again.status < 300 and again.content_type == "text/event-stream"):
                            note = f"follow-up call failed (status {again.status})"
                            break
                        rnd = await run(again)
            except TransportError as exc:
                note = f"follow-up call failed ({exc.name})"
                break
        last = rounds[-1]
        if last.finish is not None:
            if not last.others and last.stored:  # the agent never saw a call: the answer simply ends
                last.finish["choices"][0]["finish_reason"] = "stop"
            await send(_sse(last.finish))
        usages = [r.usage_chunk.get("usage") for r in rounds if r.usage_chunk]
        if last.usage_chunk is not None and not hidden_usage:
            await send(_sse({**last.usage_chunk, "usage": summed_usage(usages)}))
        await send(last.done or b"data: [DONE]\n\n")
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        incomplete = "client_disconnected"
    except (TimeoutError, aiohttp.ClientError):
        incomplete = "upstream_broke_off"
    record = stream_record(written, incomplete)
    summed = summed_usage([r.usage_chunk.get("usage") for r in rounds if r.usage_chunk])
    if summed is not None:
        record["usage"] = usage_counts(summed, "prompt_tokens", "completion_tokens")
    if len(rounds) > 1 or any(r.stored for r in rounds):
        record["response"]["provider_answers"] = [b"".join(r.raw).decode("utf-8", "replace") for r in rounds]
    if note:
        record["response"]["memory_tool_note"] = note
    await finish(record)
    if incomplete != "client_disconnected":
        try:
            await resp.write_eof()
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            pass
    return resp
