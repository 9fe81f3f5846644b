"""A local fake LLM provider: a real HTTP server speaking the OpenAI Chat Completions,
OpenAI Responses and Anthropic Messages wire formats, streaming (SSE) included.

It records every request it receives, so tests can read the `<memories>` block the
"model" was given. Its default answer is derived from that block, which makes the demo
show memory at work without a real model.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

MEMORIES_RE = re.compile(r"<memories\b[^>]*>.*?</memories>", re.S)


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def memories_block(self) -> str | None:
        m = MEMORIES_RE.search(orjson.dumps(self.body).decode().replace("\\n", "\n").replace('\\"', '"'))
        return m.group(0) if m else None


def default_reply(body: dict[str, Any]) -> str:
    block = MEMORIES_RE.search(orjson.dumps(body).decode().replace("\\n", "\n").replace('\\"', '"'))
    results = re.search(r'"type":"search_result".*?"text":"(.*?)"', orjson.dumps(body).decode())
    if results:
        return f"From memory: {results.group(1)}"
    if block:
        first = re.search(r"<memory\b[^>]*>(.*?)</memory>", block.group(0), re.S)
        if first:
            return f"From memory: {first.group(1)}"
    return "Noted."


@dataclass
class FakeProvider:
    reply: Callable[[dict[str, Any]], str] = default_reply
    chunks: int = 5
    chunk_delay_s: float = 0.0
    delay_s: float = 0.0
    received: list[Received] = field(default_factory=list)
    fail_with: list[int] = field(default_factory=list)  # statuses to answer next, in order
    record: bool = True

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_get("/v1/models", self._models)
        return app

    async def _take(self, request: web.Request) -> tuple[dict[str, Any], web.Response | None]:
        body = orjson.loads(await request.read())
        if self.record:
            self.received.append(Received(request.path, dict(request.headers), body))
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail_with:
            status = self.fail_with.pop(0)
            if request.path == "/v1/messages":
                err = {"type": "error", "error": {"type": "api_error", "message": f"fake {status}"}}
            else:
                err = {"error": {"message": f"fake {status}", "type": "server_error", "param": None, "code": None}}
            return body, web.json_response(err, status=status)
        return body, None

    def _pieces(self, text: str) -> list[str]:
        n = max(1, self.chunks)
        size = max(1, -(-len(text) // n))
        return [text[i:i + size] for i in range(0, len(text), size)] or [""]

    @staticmethod
    def _usage(body: dict[str, Any], text: str) -> tuple[int, int]:
        return max(1, len(orjson.dumps(body)) // 4), max(1, len(text.split()))

    async def _sse(self, request: web.Request, events: list[bytes]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for ev in events:
            await resp.write(ev)
            if self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
        await resp.write_eof()
        return resp

    # -- OpenAI Chat Completions --

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body, failure = await self._take(request)
        if failure:
            return failure
        model = body.get("model", "fake-model")
        cid = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        created = int(time.time())
        messages = body.get("messages") or []
        tool_call = None
        if body.get("tools") and not (messages and messages[-1].get("role") == "tool"):
            name = body["tools"][0].get("function", {}).get("name", "tool")
            tool_call = {"id": f"call_{uuid.uuid4().hex[:8]}", "type": "function",
                         "function": {"name": name, "arguments": '{"city": "Lisbon"}'}}
        text = "" if tool_call else self.reply(body)
        prompt_tokens, completion_tokens = self._usage(body, text)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                 "total_tokens": prompt_tokens + completion_tokens}
        n = int(body.get("n") or 1)
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": text or None}
            if tool_call:
                message["tool_calls"] = [tool_call]
            choices = [{"index": i, "message": message, "logprobs": None,
                        "finish_reason": "tool_calls" if tool_call else "stop"} for i in range(n)]
            return web.json_response({"id": cid, "object": "chat.completion", "created": created,
                                      "model": model, "choices": choices, "usage": usage})

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            doc = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
            return b"data: " + orjson.dumps(doc) + b"\n\n"

        events = [chunk({"role": "assistant", "content": ""})]
        if tool_call:
            events.append(chunk({"tool_calls": [{"index": 0, **tool_call}]}))
        else:
            events.extend(chunk({"content": piece}) for piece in self._pieces(text))
        events.append(chunk({}, "tool_calls" if tool_call else "stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            doc = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": [], "usage": usage}
            events.append(b"data: " + orjson.dumps(doc) + b"\n\n")
        events.append(b"data: [DONE]\n\n")
        return await self._sse(request, events)

    # -- OpenAI Responses --

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body, failure = await self._take(request)
        if failure:
            return failure
        model = body.get("model", "fake-model")
        rid = f"resp_{uuid.uuid4().hex[:16]}"
        mid = f"msg_{uuid.uuid4().hex[:16]}"
        text = self.reply(body)
        inp, out = self._usage(body, text)
        usage = {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out,
                 "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}
        part = {"type": "output_text", "text": text, "annotations": []}
        item = {"id": mid, "type": "message", "status": "completed", "role": "assistant", "content": [part]}
        response = {"id": rid, "object": "response", "created_at": int(time.time()), "status": "completed",
                    "model": model, "output": [item], "usage": usage, "instructions": body.get("instructions"),
                    "previous_response_id": body.get("previous_response_id"), "parallel_tool_calls": True,
                    "tool_choice": "auto", "tools": [], "error": None, "incomplete_details": None,
                    "metadata": {}, "temperature": 1.0, "top_p": 1.0, "text": {"format": {"type": "text"}}}
        if not body.get("stream"):
            return web.json_response(response)
        seq = iter(range(10_000))

        def ev(kind: str, **data: Any) -> bytes:
            doc = {"type": kind, "sequence_number": next(seq), **data}
            return f"event: {kind}\n".encode() + b"data: " + orjson.dumps(doc) + b"\n\n"

        pending = {**response, "status": "in_progress", "output": [], "usage": None}
        events = [ev("response.created", response=pending), ev("response.in_progress", response=pending),
                  ev("response.output_item.added", output_index=0,
                     item={**item, "status": "in_progress", "content": []}),
                  ev("response.content_part.added", item_id=mid, output_index=0, content_index=0,
                     part={**part, "text": ""})]
        events += [ev("response.output_text.delta", item_id=mid, output_index=0, content_index=0, delta=p,
                      logprobs=[]) for p in self._pieces(text)]
        events += [ev("response.output_text.done", item_id=mid, output_index=0, content_index=0, text=text,
                      logprobs=[]),
                   ev("response.content_part.done", item_id=mid, output_index=0, content_index=0, part=part),
                   ev("response.output_item.done", output_index=0, item=item),
                   ev("response.completed", response=response)]
        return await self._sse(request, events)

    # -- Anthropic Messages --

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body, failure = await self._take(request)
        if failure:
            return failure
        model = body.get("model", "claude-fake")
        mid = f"msg_{uuid.uuid4().hex[:20]}"
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        last_content = last.get("content") if isinstance(last, dict) else None
        answered_tool = isinstance(last_content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in last_content)
        tool_use = None
        if body.get("tools") and not answered_tool:
            tool_use = {"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:12]}",
                        "name": body["tools"][0].get("name", "tool"), "input": {"city": "Lisbon"}}
        text = "" if tool_use else self.reply(body)
        inp, out = self._usage(body, text)
        usage = {"input_tokens": inp, "output_tokens": out}
        citation = _first_citation(last_content)
        text_block: dict[str, Any] = {"type": "text", "text": text}
        if citation:
            text_block["citations"] = [citation]
        content: list[dict[str, Any]] = [tool_use] if tool_use else [text_block]
        stop = "tool_use" if tool_use else "end_turn"
        if not body.get("stream"):
            return web.json_response({"id": mid, "type": "message", "role": "assistant", "model": model,
                                      "content": content, "stop_reason": stop, "stop_sequence": None,
                                      "usage": usage})

        def ev(kind: str, **data: Any) -> bytes:
            return f"event: {kind}\n".encode() + b"data: " + orjson.dumps({"type": kind, **data}) + b"\n\n"

        events = [ev("message_start", message={"id": mid, "type": "message", "role": "assistant", "model": model,
                                               "content": [], "stop_reason": None, "stop_sequence": None,
                                               "usage": {"input_tokens": inp, "output_tokens": 1}})]
        if tool_use:
            events.append(ev("content_block_start", index=0, content_block={**tool_use, "input": {}}))
            events.append(ev("content_block_delta", index=0,
                             delta={"type": "input_json_delta", "partial_json": '{"city": "Lisbon"}'}))
        else:
            events.append(ev("content_block_start", index=0, content_block={"type": "text", "text": ""}))
            events.append(ev("ping"))
            if citation:
                events.append(ev("content_block_delta", index=0,
                                 delta={"type": "citations_delta", "citation": citation}))
            events += [ev("content_block_delta", index=0, delta={"type": "text_delta", "text": p})
                       for p in self._pieces(text)]
        events += [ev("content_block_stop", index=0),
                   ev("message_delta", delta={"stop_reason": stop, "stop_sequence": None},
                      usage={"output_tokens": out}),
                   ev("message_stop")]
        return await self._sse(request, events)

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [
            {"id": "fake-model", "object": "model", "created": 0, "owned_by": "memplane"}]})


def _first_citation(content: Any) -> dict[str, Any] | None:
    """Cite the first search_result block of the latest user turn, as Claude does."""
    if not isinstance(content, list):
        return None
    for i, block in enumerate(content):
        if isinstance(block, dict) and block.get("type") == "search_result":
            text = "".join(p.get("text", "") for p in block.get("content") or [])
            return {"type": "search_result_location", "source": block.get("source"),
                    "title": block.get("title"), "cited_text": text[:200], "search_result_index": i,
                    "start_block_index": 0, "end_block_index": 1}
    return None
