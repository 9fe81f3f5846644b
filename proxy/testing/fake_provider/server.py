"""The fake provider's HTTP face: OpenAI Chat Completions, OpenAI Responses (with stored
responses for `previous_response_id`) and Anthropic Messages, streaming (SSE) and not.

It is strict: a request the real API would refuse (rules.py) gets the same 400 in the provider's
own error shape. It records every request, so tests can read the `<memories>` block the "model"
was given, simulates prompt caching (cache.py) and answers through a scriptable model (model.py).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web

from .cache import AnthropicCache, OpenAIPrefixCache, openai_prompt, tokens_of
from .model import (
    Answer,
    Model,
    View,
    anthropic_view,
    chat_view,
    default_model,
    default_reply,
    memory_blocks,
    responses_view,
)
from .rules import Problem, anthropic_problem, chat_problem, conversation_id, input_items, responses_problem
from .signed import Signer


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    query: str = ""
    # Responses / Anthropic threads: the conversation the model saw (stored items + this input)
    context: list[dict[str, Any]] | None = None
    # Anthropic threads: the system prompt the model saw (a `continue` uses the thread's)
    system: Any = None
    status: int = 200  # what the provider answered (400 when a strict rule refused the request)
    error: str | None = None
    usage: dict[str, Any] | None = None  # the usage the provider reported (its prompt-cache arithmetic)

    @property
    def cache_read(self) -> int:
        """Prompt tokens the provider read from its cache for this request (either API's field)."""
        u = self.usage or {}
        return int(u.get("cache_read_input_tokens")
                   or (u.get("input_tokens_details") or u.get("prompt_tokens_details") or {}).get("cached_tokens") or 0)

    @property
    def prompt_tokens(self) -> int:
        """All prompt tokens of the request, cached or not."""
        u = self.usage or {}
        if "cache_read_input_tokens" in u:
            return int(u["input_tokens"] + u["cache_read_input_tokens"] + u["cache_creation_input_tokens"])
        return int(u.get("input_tokens") or u.get("prompt_tokens") or 0)

    @property
    def memories_block(self) -> str | None:
        found = memory_blocks(self.body)
        return found[0] if found else None

    @property
    def memories_blocks(self) -> list[str]:
        return memory_blocks(self.body)


def _openai_error(problem: Problem) -> web.Response:
    kind = "invalid_request_error"
    return web.json_response({"error": {"message": problem.message, "type": kind, "param": problem.param,
                                        "code": problem.code}}, status=problem.status)


def _anthropic_error(problem: Problem) -> web.Response:
    error: dict[str, Any] = {"type": "invalid_request_error", "message": problem.message}
    if problem.details:
        error["details"] = problem.details
    return web.json_response({"type": "error", "error": error,
                              "request_id": f"req_{uuid.uuid4().hex[:24]}"}, status=problem.status)


@dataclass
class FakeProvider:
    reply: Any = default_reply  # Callable[[dict], str]: the default model's text answer
    chunks: int = 5
    chunk_delay_s: float = 0.0
    delay_s: float = 0.0
    slow_models: dict[str, float] = field(default_factory=dict)  # model → seconds it takes to answer
    stall_after: int | None = None  # a stream that stops sending after this many events (a provider gone quiet)
    received: list[Received] = field(default_factory=list)
    fail_with: list[int] = field(default_factory=list)  # statuses to answer next, in order
    record: bool = True
    model: Model | None = None  # None: call the first tool once, then answer with `reply`
    strict: bool = True
    # The operator's organization/project; an OpenAI-Organization / OpenAI-Project header naming
    # another one is refused with 401 as the real API does (mismatched_organization).
    organization: str | None = None
    project: str | None = None
    anthropic_cache: AnthropicCache = field(default_factory=AnthropicCache)
    openai_cache: OpenAIPrefixCache = field(default_factory=OpenAIPrefixCache)
    stored: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # response id → conversation
    threads: dict[str, dict[str, Any]] = field(default_factory=dict)  # Anthropic message id → thread state
    signer: Signer = field(default_factory=Signer)  # signs thinking blocks and encrypted reasoning

    def app(self) -> web.Application:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/messages/count_tokens", self._count_tokens)
        app.router.add_get("/v1/models", self._models)
        return app

    def _answer(self, view: View) -> Answer:
        return (self.model or default_model(self.reply))(view)

    async def _take(self, request: web.Request) -> tuple[dict[str, Any], Received | None, web.Response | None]:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            body = None
        seen = None
        if self.record:
            seen = Received(request.path, dict(request.headers), body if isinstance(body, dict) else {},
                            request.query_string)
            self.received.append(seen)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if isinstance(body, dict) and isinstance(body.get("model"), str) and body["model"] in self.slow_models:
            await asyncio.sleep(self.slow_models[body["model"]])
        anthropic = request.path.startswith("/v1/messages")
        render = _anthropic_error if anthropic else _openai_error
        if not isinstance(body, dict):
            return {}, seen, self._refuse(seen, render, Problem("The request body is not valid JSON."))
        if self.fail_with:
            status = self.fail_with.pop(0)
            if anthropic:
                err = {"type": "error", "error": {"type": "api_error", "message": f"fake {status}"}}
            else:
                err = {"error": {"message": f"fake {status}", "type": "server_error", "param": None, "code": None}}
            if seen:
                seen.status = status
            return body, seen, web.json_response(err, status=status)
        if not anthropic:
            for header, expected, code in (("OpenAI-Organization", self.organization, "mismatched_organization"),
                                           ("OpenAI-Project", self.project, "mismatched_project")):
                sent = request.headers.get(header)
                if sent is not None and sent != expected:
                    # https://platform.openai.com/docs/api-reference/authentication — the headers name
                    # the organization/project the API key belongs to; another one is a 401.
                    what = "organization" if code == "mismatched_organization" else "project"
                    return body, seen, self._refuse(seen, render, Problem(
                        f"{header} header should match {what} for API key", None, 401, code))
        return body, seen, None

    def _refuse(self, seen: Received | None, render: Any, problem: Problem) -> web.Response:
        if seen:
            seen.status, seen.error = problem.status, problem.message
        return render(problem)

    def _pieces(self, text: str) -> list[str]:
        n = max(1, self.chunks)
        size = max(1, -(-len(text) // n))
        return [text[i:i + size] for i in range(0, len(text), size)] or [""]

    @staticmethod
    def _out_tokens(answer: Answer) -> int:
        return max(1, len(answer.text.split()) + 8 * len(answer.tool_calls))

    async def _sse(self, request: web.Request, events: list[bytes]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        for n, ev in enumerate(events):
            if self.stall_after is not None and n == self.stall_after:
                await asyncio.sleep(3600)  # the proxy's read timeout ends it
            await resp.write(ev)
            if self.chunk_delay_s:
                await asyncio.sleep(self.chunk_delay_s)
        await resp.write_eof()
        return resp

    # -- OpenAI Chat Completions --

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body, seen, failure = await self._take(request)
        if failure:
            return failure
        problem = chat_problem(body) if self.strict else None
        if problem:
            return self._refuse(seen, _openai_error, problem)
        model = body.get("model", "fake-model")
        cid = f"chatcmpl-{uuid.uuid4().hex[:12]}"
        created = int(time.time())
        answer = self._answer(chat_view(body))
        calls = [{"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                  "function": {"name": c.name, "arguments": orjson.dumps(c.arguments).decode()}}
                 for c in answer.tool_calls]
        prompt = openai_prompt(body.get("tools"), body["messages"])
        prompt_tokens, completion_tokens = tokens_of(prompt), self._out_tokens(answer)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                 "total_tokens": prompt_tokens + completion_tokens,
                 "prompt_tokens_details": {"cached_tokens": self.openai_cache.cached_tokens(prompt), "audio_tokens": 0},
                 "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0,
                                               "accepted_prediction_tokens": 0, "rejected_prediction_tokens": 0}}
        finish = "tool_calls" if calls else "stop"
        if seen:
            seen.usage = usage
        n = body["n"] if isinstance(body.get("n"), int) and body["n"] > 0 else 1  # not strict: what a lenient server does
        if not body.get("stream"):
            message: dict[str, Any] = {"role": "assistant", "content": answer.text or None, "refusal": None}
            if answer.ran:  # a search model's web results, as the answer cites them (API reference, `annotations`)
                message["annotations"] = answer.ran
            if calls:
                message["tool_calls"] = calls
            choices = [{"index": i, "message": message, "logprobs": None, "finish_reason": finish} for i in range(n)]
            return web.json_response({"id": cid, "object": "chat.completion", "created": created,
                                      "model": model, "choices": choices, "usage": usage})

        def chunk(delta: dict[str, Any], finish_reason: str | None = None) -> bytes:
            doc = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]}
            return b"data: " + orjson.dumps(doc) + b"\n\n"

        events = [chunk({"role": "assistant", "content": ""})]
        if answer.text:
            events.extend(chunk({"content": piece}) for piece in self._pieces(answer.text))
        for i, call in enumerate(calls):
            # the id and name first, then the arguments in pieces, as the real stream does
            events.append(chunk({"tool_calls": [{"index": i, "id": call["id"], "type": "function",
                                                 "function": {"name": call["function"]["name"], "arguments": ""}}]}))
            events.extend(chunk({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
                          for piece in self._pieces(call["function"]["arguments"]))
        events.append(chunk({}, finish))
        if isinstance(body.get("stream_options"), dict) and body["stream_options"].get("include_usage"):
            doc = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                   "choices": [], "usage": usage}
            events.append(b"data: " + orjson.dumps(doc) + b"\n\n")
        events.append(b"data: [DONE]\n\n")
        return await self._sse(request, events)

    # -- OpenAI Responses --

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        body, seen, failure = await self._take(request)
        if failure:
            return failure
        problem = responses_problem(body, self.stored.get) if self.strict else None
        if problem is None and self.strict:
            problem = self.signer.reasoning_problem(body, input_items(body.get("input", [])))
        if problem:
            return self._refuse(seen, _openai_error, problem)
        prev = body.get("previous_response_id")
        # A continuation replays the stored conversation (its input and output items); the
        # previous `instructions` are not carried over (https://platform.openai.com/docs/api-reference/responses/create).
        conversation = conversation_id(body)  # a conversation the provider keeps (created on first use here)
        prior = self.stored.get(prev, []) if prev else self.stored.get(f"conversation:{conversation}", [])
        context = [*prior, *input_items(body.get("input", []))]
        if seen:
            seen.context = context
        model = body.get("model", "fake-model")
        rid = f"resp_{uuid.uuid4().hex[:16]}"
        answer = self._answer(responses_view(body, context))
        output: list[dict[str, Any]] = []
        if "reasoning.encrypted_content" in (body.get("include") or ()):
            output.append(self.signer.reasoning_item())
        output.extend(answer.ran)
        if answer.text:
            output.append({"id": f"msg_{uuid.uuid4().hex[:16]}", "type": "message", "status": "completed",
                           "role": "assistant", "content": [{"type": "output_text", "text": answer.text,
                                                             "annotations": []}]})
        for call in answer.tool_calls:
            output.append({"id": f"fc_{uuid.uuid4().hex[:16]}", "type": "function_call", "status": "completed",
                           "call_id": f"call_{uuid.uuid4().hex[:12]}", "name": call.name,
                           "arguments": orjson.dumps(call.arguments).decode()})
        if body.get("store", True):
            self.stored[rid] = [*context, *output]
        if conversation:  # a conversation keeps its items whatever `store` says
            self.stored[f"conversation:{conversation}"] = [*context, *output]
        instructions = [{"role": "system", "content": body["instructions"]}] if body.get("instructions") else []
        prompt = openai_prompt(body.get("tools"), instructions + context)
        inp, out = tokens_of(prompt), self._out_tokens(answer)
        usage = {"input_tokens": inp, "output_tokens": out, "total_tokens": inp + out,
                 "input_tokens_details": {"cached_tokens": self.openai_cache.cached_tokens(prompt)},
                 "output_tokens_details": {"reasoning_tokens": 0}}
        if seen:
            seen.usage = usage
        response = {"id": rid, "object": "response", "created_at": int(time.time()), "status": "completed",
                    "model": model, "output": output, "usage": usage, "instructions": body.get("instructions"),
                    "previous_response_id": prev, "parallel_tool_calls": True,
                    "tool_choice": body.get("tool_choice", "auto"), "tools": body.get("tools") or [], "error": None,
                    "incomplete_details": None, "metadata": {}, "temperature": 1.0, "top_p": 1.0,
                    "text": {"format": {"type": "text"}}, "store": body.get("store", True)}
        if not body.get("stream"):
            return web.json_response(response)
        seq = iter(range(100_000))

        def ev(kind: str, **data: Any) -> bytes:
            doc = {"type": kind, "sequence_number": next(seq), **data}
            return f"event: {kind}\n".encode() + b"data: " + orjson.dumps(doc) + b"\n\n"

        pending = {**response, "status": "in_progress", "output": [], "usage": None}
        events = [ev("response.created", response=pending), ev("response.in_progress", response=pending)]
        for index, item in enumerate(output):
            if item["type"] == "reasoning":
                events.append(ev("response.output_item.added", output_index=index,
                                 item={**item, "encrypted_content": None}))
            elif item["type"] == "message":
                part = item["content"][0]
                mid = item["id"]
                events += [ev("response.output_item.added", output_index=index,
                              item={**item, "status": "in_progress", "content": []}),
                           ev("response.content_part.added", item_id=mid, output_index=index, content_index=0,
                              part={**part, "text": ""})]
                events += [ev("response.output_text.delta", item_id=mid, output_index=index, content_index=0,
                              delta=p, logprobs=[]) for p in self._pieces(part["text"])]
                events += [ev("response.output_text.done", item_id=mid, output_index=index, content_index=0,
                              text=part["text"], logprobs=[]),
                           ev("response.content_part.done", item_id=mid, output_index=index, content_index=0,
                              part=part)]
            elif item["type"] != "function_call":  # a hosted tool's item: added, then done whole
                events.append(ev("response.output_item.added", output_index=index,
                                 item={**item, "status": "in_progress"}))
            else:
                events.append(ev("response.output_item.added", output_index=index,
                                 item={**item, "status": "in_progress", "arguments": ""}))
                events += [ev("response.function_call_arguments.delta", item_id=item["id"], output_index=index,
                              delta=p) for p in self._pieces(item["arguments"])]
                events.append(ev("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                                 arguments=item["arguments"]))
            events.append(ev("response.output_item.done", output_index=index, item=item))
        events.append(ev("response.completed", response=response))
        return await self._sse(request, events)

    # -- Anthropic Messages --

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        body, seen, failure = await self._take(request)
        if failure:
            return failure
        thread = body.get("thread") if isinstance(body.get("thread"), dict) else None
        prompt, problem = self._thread_prompt(body, thread)
        if problem is None and self.strict:
            problem = anthropic_problem(prompt, request.headers.get("anthropic-beta", "")) \
                or self.signer.thinking_problem(prompt)
        if problem:
            return self._refuse(seen, _anthropic_error, problem)
        if seen and thread:
            seen.context, seen.system = prompt["messages"], prompt.get("system")
        model = body.get("model", "claude-fake")
        mid = f"msg_{uuid.uuid4().hex[:20]}"
        answer = self._answer(anthropic_view(prompt))
        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        citation = None if answer.tool_calls else _first_citation(last.get("content") if isinstance(last, dict)
                                                                  else None)
        content: list[dict[str, Any]] = []
        if (prompt.get("thinking") or {}).get("type") in ("enabled", "adaptive"):
            content.append(self.signer.thinking_block((prompt.get("thinking") or {}).get("display")))
        content.extend(answer.ran)
        if answer.text:
            text_block: dict[str, Any] = {"type": "text", "text": answer.text}
            if citation:
                text_block["citations"] = [citation]
            content.append(text_block)
        for call in answer.tool_calls:
            content.append({"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:12]}", "name": call.name,
                            "input": call.arguments})
        stop = "tool_use" if answer.tool_calls else "end_turn"
        usage = {**self.anthropic_cache.usage(prompt), "output_tokens": self._out_tokens(answer)}
        if seen:
            seen.usage = usage
        if thread:
            self.threads[mid] = {**{k: prompt[k] for k in ("system", "tools") if k in prompt},
                                 "messages": [*prompt["messages"], {"role": "assistant", "content": content}]}
        if not body.get("stream"):
            return web.json_response({"id": mid, "type": "message", "role": "assistant", "model": model,
                                      "content": content, "stop_reason": stop, "stop_sequence": None,
                                      "usage": usage})

        def ev(kind: str, **data: Any) -> bytes:
            return f"event: {kind}\n".encode() + b"data: " + orjson.dumps({"type": kind, **data}) + b"\n\n"

        events = [ev("message_start", message={"id": mid, "type": "message", "role": "assistant", "model": model,
                                               "content": [], "stop_reason": None, "stop_sequence": None,
                                               "usage": {**usage, "output_tokens": 1}}),
                  ev("ping")]
        for index, block in enumerate(content):
            if block["type"] == "thinking":
                events.append(ev("content_block_start", index=index,
                                 content_block={"type": "thinking", "thinking": "", "signature": ""}))
                if block["thinking"]:
                    events.append(ev("content_block_delta", index=index,
                                     delta={"type": "thinking_delta", "thinking": block["thinking"]}))
                events.append(ev("content_block_delta", index=index,
                                 delta={"type": "signature_delta", "signature": block["signature"]}))
            elif block["type"] == "text":
                events.append(ev("content_block_start", index=index, content_block={"type": "text", "text": ""}))
                if block.get("citations"):
                    events.append(ev("content_block_delta", index=index,
                                     delta={"type": "citations_delta", "citation": block["citations"][0]}))
                events += [ev("content_block_delta", index=index, delta={"type": "text_delta", "text": p})
                           for p in self._pieces(block["text"])]
            elif block["type"] not in ("tool_use", "server_tool_use"):
                # a server tool's result comes whole in its content_block_start, no deltas (docs:
                # "Streaming Messages" → "Streaming request with web search")
                events.append(ev("content_block_start", index=index, content_block=block))
            else:
                events.append(ev("content_block_start", index=index, content_block={**block, "input": {}}))
                events += [ev("content_block_delta", index=index, delta={"type": "input_json_delta", "partial_json": p})
                           for p in self._pieces(orjson.dumps(block["input"]).decode())]
            events.append(ev("content_block_stop", index=index))
        events += [ev("message_delta", delta={"stop_reason": stop, "stop_sequence": None},
                      usage={"output_tokens": usage["output_tokens"]}),
                   ev("message_stop")]
        return await self._sse(request, events)

    def _thread_prompt(self, body: dict[str, Any], thread: dict[str, Any] | None
                       ) -> tuple[dict[str, Any], Problem | None]:
        """The prompt a Messages request stands for. With a message thread (the anthropic SDK's
        `message-threads` beta, which its tool runner uses) a `continue` sends only the new turn's
        messages: the server replays the stored conversation and keeps the `system` and `tools`
        the thread was created with, refusing a request that repeats them (see the SDK's
        `lib/threads/_thread_state.py`, CREATE_ONLY_FIELDS)."""
        if not thread or thread.get("type") != "continue":
            return {k: v for k, v in body.items() if k != "thread"}, None
        stored = self.threads.get(thread.get("previous_message_id"))
        if stored is None:
            return body, Problem(f"thread not found: no stored message {thread.get('previous_message_id')!r}",
                                 "thread", details={"error_code": "thread_not_found"})
        repeated = [f for f in ("system", "tools") if f in body]
        if repeated:
            return body, Problem(f"{', '.join(repeated)}: cannot be set on a `continue` request; the thread keeps "
                                 "the values it was created with.", repeated[0])
        prompt = {k: v for k, v in body.items() if k != "thread"}
        prompt.update({k: v for k, v in stored.items() if k != "messages"})
        prompt["messages"] = [*stored["messages"], *(body.get("messages") or [])]
        return prompt, None

    async def _count_tokens(self, request: web.Request) -> web.Response:
        body, seen, failure = await self._take(request)
        if failure:
            return failure
        return web.json_response({"input_tokens": tokens_of(orjson.dumps(body))})

    async def _models(self, request: web.Request) -> web.Response:
        """Each provider's own list shape, chosen by the caller's dialect: Anthropic callers send
        `anthropic-version` (and `x-api-key`, or a bearer token in newer SDKs)."""
        if self.record:
            self.received.append(Received(request.path, dict(request.headers), {}, request.query_string))
        if "anthropic-version" in request.headers or "x-api-key" in request.headers:
            model = {"type": "model", "id": "claude-fake", "display_name": "Claude Fake",
                     "created_at": "2025-01-01T00:00:00Z"}
            return web.json_response({"data": [model], "has_more": False, "first_id": "claude-fake",
                                      "last_id": "claude-fake"})
        return web.json_response({"object": "list", "data": [
            {"id": "fake-model", "object": "model", "created": 0, "owned_by": "memplane"}]})


def _first_citation(content: Any) -> dict[str, Any] | None:
    """Cite the first search_result block (with citations on) of the latest user turn, as Claude does."""
    if not isinstance(content, list):
        return None
    for i, block in enumerate(content):
        if isinstance(block, dict) and block.get("type") == "search_result" \
                and (block.get("citations") or {}).get("enabled"):
            text = "".join(p.get("text", "") for p in block.get("content") or [])
            return {"type": "search_result_location", "source": block.get("source"),
                    "title": block.get("title"), "cited_text": text[:200], "search_result_index": i,
                    "start_block_index": 0, "end_block_index": 1}
    return None
