"""Streamed answers with `store_memory` on offer, over rounds of provider streams (Chat Completions:
chat_stream.py; Anthropic Messages: messages_stream.py; Responses: responses_stream.py).

What the agent may see goes out as it arrives; store_memory calls and the stream's end are held
back. When a round ends with only store_memory calls, memplane stores, asks the provider again
(streaming) with the results, and the new round continues the same stream to the agent (at most
MAX_EXTRA_CALLS more calls); the held-back end of the last round closes it, with the usage of
every call summed. Mixed with the agent's own calls: memplane stores, and the stream ends as the
provider ended it, without memplane's calls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import orjson
from aiohttp import web

from ..errors import stream_error_event
from ..formats.base import usage_counts
from ..ledger.entry import nests_safely
from ..sse import SSESplitter, end_stream
from ..transport_errors import TransportError, transport_errors
from .answers import follow_up, summed_usage
from .chat_stream import ChatRound
from .messages_stream import MessagesRound
from .responses_stream import ResponsesRound
from .write import store

MAX_EXTRA_CALLS = 3
ROUNDS = {"openai": ChatRound, "anthropic": MessagesRound, "responses": ResponsesRound}
USAGE_KEYS = {"openai": ("prompt_tokens", "completion_tokens"), "anthropic": ("input_tokens", "output_tokens"),
              "responses": ("input_tokens", "output_tokens")}


async def relay_stream(*, fmt_name: str, request: web.Request, state: Any, ctx: Any, body: dict[str, Any],
                       upstream: aiohttp.ClientResponse, headers: dict[str, str], hidden_usage: bool,
                       reopen: Callable[[dict[str, Any]], Any],
                       finish: Callable[[dict[str, Any]], Awaitable[None]],
                       stream_record: Callable[[list[bytes], str | None], dict[str, Any]],
                       session_id: str | None, turn_id: str) -> web.StreamResponse:
    resp = web.StreamResponse(status=upstream.status, headers=headers)
    resp.headers["Cache-Control"] = "no-cache"
    await resp.prepare(request)
    written: list[bytes] = []
    rounds: list[Any] = []
    incomplete = note = None
    tainted = state.turn_taint.of_turn(ctx.agent_id, session_id, turn_id, body)

    async def send(data: bytes) -> None:
        written.append(data)
        await resp.write(data)

    async def run(source: aiohttp.ClientResponse) -> Any:
        rnd = ROUNDS[fmt_name](first_index=rounds[-1].next_index() if rounds else 0, first=not rounds)
        if rounds and hasattr(rnd, "seq"):  # Responses: one sequence of event numbers, items carried over
            rnd.seq, rnd.seen_items, rnd.ids = rounds[-1].seq, rounds[-1].seen_items, rounds[-1].ids
        splitter = SSESplitter()
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
                results[slot["id"]] = await store(state, ctx, session_id, turn_id, args, tainted=tainted)
            if rnd.others or extra == MAX_EXTRA_CALLS:
                note = None if rnd.others else f"stopped after {MAX_EXTRA_CALLS} extra provider calls"
                break
            body = follow_up(fmt_name, body, rnd.assistant_doc(), results)
            if not nests_safely(body):  # the model's call is too deep to hand back: the agent gets what came
                note = "follow-up call not sent (the answer is nested too deeply to send back)"
                break
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
        await send(rounds[-1].closing(rounds, hidden_usage))
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        incomplete = "client_disconnected"
    except (TimeoutError, aiohttp.ClientError):
        incomplete = "upstream_broke_off"
    record = stream_record(written, incomplete)
    summed = summed_usage([r.usage() for r in rounds])
    if isinstance(summed, dict):
        record["usage"] = usage_counts(summed, *USAGE_KEYS[fmt_name])
    if len(rounds) > 1 or any(r.stored for r in rounds):
        record["response"]["provider_answers"] = [b"".join(r.raw).decode("utf-8", "replace") for r in rounds]
    if note:
        record["response"]["memory_tool_note"] = note
    await finish(record)
    return await end_stream(resp, incomplete, stream_error_event(fmt_name))
