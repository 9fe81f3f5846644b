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
from dataclasses import dataclass, field
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
from .write import TurnWrites

MAX_EXTRA_CALLS = 3
ROUNDS = {"openai": ChatRound, "anthropic": MessagesRound, "responses": ResponsesRound}
USAGE_KEYS = {"openai": ("prompt_tokens", "completion_tokens"), "anthropic": ("input_tokens", "output_tokens"),
              "responses": ("input_tokens", "output_tokens")}


@dataclass
class _Relayed:
    """The agent's one stream over the rounds of provider streams: what was written, each round,
    and why memplane stopped handing results back (`note`), if it did."""

    fmt_name: str
    resp: web.StreamResponse
    kept: Callable[[], Any] = list  # what the ledger keeps of a stream: the head of it (turn/answer_cap.py)
    written: Any = None
    rounds: list[Any] = field(default_factory=list)
    note: str | None = None

    def __post_init__(self) -> None:
        self.written = self.kept()

    async def send(self, data: bytes) -> None:
        self.written.append(data)
        await self.resp.write(data)

    async def run(self, source: aiohttp.ClientResponse) -> Any:
        """One provider stream: what the agent may see goes out as it arrives."""
        rounds = self.rounds
        rnd = ROUNDS[self.fmt_name](first_index=rounds[-1].next_index() if rounds else 0, first=not rounds)
        if rounds and hasattr(rnd, "seq"):  # Responses: one sequence of event numbers, items carried over
            rnd.seq, rnd.seen_items, rnd.ids = rounds[-1].seq, rounds[-1].seen_items, rounds[-1].ids
        splitter = SSESplitter()
        rnd.raw = self.kept()
        rounds.append(rnd)
        async for chunk in source.content.iter_any():
            rnd.raw.append(chunk)
            out = [b for raw in splitter.feed(chunk) if (b := rnd.take(raw)) is not None]
            if out:
                await self.send(b"".join(out))
        if tail := splitter.flush():
            if (b := rnd.take(tail + b"\n\n")) is not None:
                await self.send(b)
        return rnd


async def relay_stream(*, fmt_name: str, request: web.Request, state: Any, ctx: Any, body: dict[str, Any],
                       upstream: aiohttp.ClientResponse, headers: dict[str, str], hidden_usage: bool,
                       reopen: Callable[[dict[str, Any]], Any],
                       finish: Callable[[dict[str, Any]], Awaitable[None]],
                       stream_record: Callable[[Any, str | None], dict[str, Any]],
                       session_id: str | None, turn_id: str, kept: Callable[[], Any] = list) -> web.StreamResponse:
    resp = web.StreamResponse(status=upstream.status, headers=headers)
    resp.headers["Cache-Control"] = "no-cache"
    await resp.prepare(request)
    relayed = _Relayed(fmt_name, resp, kept)
    incomplete = None
    try:
        await _rounds(relayed, upstream, body, reopen, TurnWrites.of(state, ctx, session_id, turn_id, body))
        await relayed.send(relayed.rounds[-1].closing(relayed.rounds, hidden_usage))
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        incomplete = "client_disconnected"
    except (TimeoutError, aiohttp.ClientError):
        incomplete = "upstream_broke_off"
    await finish(_record(relayed, stream_record(relayed.written, incomplete)))
    return await end_stream(resp, incomplete, stream_error_event(fmt_name))


async def _rounds(relayed: _Relayed, upstream: aiohttp.ClientResponse, body: dict[str, Any],
                  reopen: Callable[[dict[str, Any]], Any],
                  store_one: Callable[[Any, Any], Awaitable[tuple[bool, str]]]) -> None:
    """Round after round while a round ends with only store_memory calls (at most MAX_EXTRA_CALLS more)."""
    rnd = await relayed.run(upstream)
    for extra in range(MAX_EXTRA_CALLS + 1):
        if not rnd.stored:
            break
        results = {}
        for slot in rnd.stored.values():
            try:
                args = orjson.loads(slot["arguments"] or "{}")
            except orjson.JSONDecodeError:
                args = slot["arguments"]
            results[slot["id"]] = await store_one(args, rnd.assistant_doc())
        if rnd.others or extra == MAX_EXTRA_CALLS:
            relayed.note = None if rnd.others else f"stopped after {MAX_EXTRA_CALLS} extra provider calls"
            break
        body = follow_up(relayed.fmt_name, body, rnd.assistant_doc(), results)
        if not nests_safely(body):  # the model's call is too deep to hand back: the agent gets what came
            relayed.note = "follow-up call not sent (the answer is nested too deeply to send back)"
            break
        rnd = await _again(relayed, reopen, body)
        if rnd is None:
            break


async def _again(relayed: _Relayed, reopen: Callable[[dict[str, Any]], Any], body: dict[str, Any]) -> Any:
    """The next round: the store_memory results handed back, streamed. None: the call failed (noted)."""
    try:
        with transport_errors():
            async with await reopen(body) as again:
                if not (200 <= again.status < 300 and again.content_type == "text/event-stream"):
                    relayed.note = f"follow-up call failed (status {again.status})"
                    return None
                return await relayed.run(again)
    except TransportError as exc:
        relayed.note = f"follow-up call failed ({exc.name})"
        return None


def _record(relayed: _Relayed, record: dict[str, Any]) -> dict[str, Any]:
    """The ledger's record of the stream: the usage of every call summed, each provider answer kept."""
    rounds = relayed.rounds
    summed = summed_usage([r.usage() for r in rounds])
    if isinstance(summed, dict):
        record["usage"] = usage_counts(summed, *USAGE_KEYS[relayed.fmt_name])
    if len(rounds) > 1 or any(r.stored for r in rounds):
        record["response"]["provider_answers"] = [b"".join(r.raw).decode("utf-8", "replace") for r in rounds]
    if relayed.note:
        record["response"]["memory_tool_note"] = relayed.note
    return record
