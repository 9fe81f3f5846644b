"""The relay step: the provider's answer back to the agent, one of four ways (RELAYS), each ending in
the record step. A whole answer is ledgered before it is sent; a stream is ledgered once it ends."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web

from .. import memory_tool
from ..errors import stream_error_event
from ..formats import StreamState
from ..sse import SSESplitter, end_stream, parse_event
from ..upstream import returned_headers
from .answer import first_response_id, safe_feed, stream_record, whole_record
from .answer_cap import Head
from .provider import read_answer, reopen, resend
from .record import link, record
from .value import Turn


async def relay(turn: Turn) -> web.StreamResponse:
    """The one dispatch: by whether the answer is a 2xx event stream and the memory tool was offered."""
    upstream = turn.upstream
    assert upstream is not None
    ok = 200 <= upstream.status < 300
    return await RELAYS[ok and upstream.content_type == "text/event-stream", ok and turn.store_tool](turn)


async def relay_whole(turn: Turn) -> web.StreamResponse:
    """Read the whole answer, ledger it (2xx only), then send it: every answer seen is durable."""
    upstream = turn.upstream
    assert upstream is not None
    data = await read_answer(upstream)
    resp = web.Response(status=upstream.status, body=data, headers={**returned_headers(upstream.headers), **turn.said})
    if 200 <= upstream.status < 300:
        await record(turn, whole_record(turn.fmt, data, turn.state.settings.ledger_max_answer_bytes))
    return resp


async def relay_stream(turn: Turn) -> web.StreamResponse:
    """Forward SSE events as they arrive; ledger the assembled answer before closing the stream.

    A client that disconnects mid-stream ends the upstream call (leaving the loop closes it),
    and what was received is still ledgered, marked incomplete.
    """
    upstream, fmt, hidden_usage = turn.upstream, turn.fmt, turn.hidden_usage
    assert upstream is not None
    resp = web.StreamResponse(status=upstream.status, headers={**returned_headers(upstream.headers), **turn.said})
    resp.headers["Cache-Control"] = "no-cache"
    await resp.prepare(turn.request)
    received = Head(turn.state.settings.ledger_max_answer_bytes)  # what the ledger keeps of it
    incomplete = None
    try:
        await _pass_on(turn, resp, received)
    except (ConnectionResetError, aiohttp.ClientConnectionResetError):
        incomplete = "client_disconnected"
    except asyncio.CancelledError:  # servers that cancel handlers when the client goes away
        await record(turn, stream_record(fmt, received, hidden_usage, "client_disconnected"))
        raise
    except (asyncio.TimeoutError, aiohttp.ClientError):
        incomplete = "upstream_broke_off"
    except Exception as exc:  # headers are sent: never a second response inside this one
        incomplete = f"relay_failed: {type(exc).__name__}"
    await record(turn, stream_record(fmt, received, hidden_usage, incomplete))
    return await end_stream(resp, incomplete, stream_error_event(fmt.name))


async def _pass_on(turn: Turn, resp: web.StreamResponse, received: Head) -> None:
    """The stream's bytes as they arrive, kept in `received`. A chain step's response id is linked
    to its user turn as soon as an event names it, before the client can continue from it."""
    assert turn.upstream is not None
    splitter = SSESplitter()
    watch = SSESplitter() if turn.chained else None
    async for chunk in turn.upstream.content.iter_any():
        received.append(chunk)
        if watch is not None and (rid := first_response_id(turn.fmt, watch.feed(chunk))):
            link(turn, rid)
            watch = None
        if not turn.hidden_usage:
            await resp.write(chunk)  # bytes go out as they arrive; parsing waits until the end
            continue
        kept = _without_usage(turn, splitter, chunk)
        if kept:
            await resp.write(b"".join(kept))
    tail = splitter.flush()
    if tail:
        await resp.write(tail)


def _without_usage(turn: Turn, splitter: SSESplitter, chunk: bytes) -> list[bytes]:
    """One write per upstream chunk; only a usage-only event (empty choices) is parsed, to drop the
    usage chunk memplane asked for on the agent's behalf."""
    return [raw for raw in splitter.feed(chunk) if b'"choices":[]' not in raw
            or safe_feed(turn.fmt, StreamState(), *parse_event(raw), True)]


async def relay_tool_whole(turn: Turn) -> web.StreamResponse:
    """The memory tool offered, a whole answer: memplane runs its store_memory calls (memory_tool/loop.py)."""
    upstream = turn.upstream
    assert upstream is not None
    return await memory_tool.relay_whole(
        request=turn.request, state=turn.state, ctx=turn.ctx, fmt=turn.fmt, body=turn.effective, upstream=upstream,
        resend=functools.partial(resend, turn), finish=functools.partial(record, turn),
        whole_record=functools.partial(whole_record, limit=turn.state.settings.ledger_max_answer_bytes),
        said=turn.said, session_id=turn.session_id, turn_id=turn.turn_id,
        read=functools.partial(read_answer, upstream))


async def relay_tool_stream(turn: Turn) -> web.StreamResponse:
    """The memory tool offered, a stream: memplane runs its store_memory calls (memory_tool/stream.py)."""
    upstream = turn.upstream
    assert upstream is not None
    return await memory_tool.relay_stream(
        fmt_name=turn.fmt.name, request=turn.request, state=turn.state, ctx=turn.ctx, body=turn.effective,
        upstream=upstream, headers={**returned_headers(upstream.headers), **turn.said},
        hidden_usage=turn.hidden_usage, reopen=functools.partial(reopen, turn), finish=functools.partial(record, turn),
        stream_record=lambda sent, incomplete: stream_record(turn.fmt, sent, False, incomplete),
        kept=lambda: Head(turn.state.settings.ledger_max_answer_bytes),
        session_id=turn.session_id, turn_id=turn.turn_id)


# (a 2xx event stream, the memory tool offered) → how the answer goes back
RELAYS: dict[tuple[bool, bool], Callable[[Turn], Awaitable[web.StreamResponse]]] = {
    (False, False): relay_whole,  # an error, or a whole answer
    (True, False): relay_stream,
    (False, True): relay_tool_whole,
    (True, True): relay_tool_stream,
}
