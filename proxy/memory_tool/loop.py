"""The whole-answer loop: when the provider's answer calls `store_memory`, memplane stores, and
either hands the results back to the provider itself (the answer held only store_memory calls;
at most MAX_EXTRA_CALLS more provider calls per turn, their usage summed into the answer's) or
removes its calls and returns the rest (the agent's own tool calls are the agent's to run).

The ledger keeps every provider answer as it came (`response.provider_answers`) and, as the
response, what the agent received.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from ..ledger.entry import nests_safely
from ..transport_errors import TransportError
from ..upstream import returned_headers
from .answers import calls, follow_up, hide_tool, summed_usage, without_calls
from .offer import TOOL_NAME, offer, why_not
from .write import TurnWrites

MAX_EXTRA_CALLS = 3


def offered(state: Any, ctx: Any, fmt_name: str, body: dict[str, Any], turn: Any = None,
            continues: bool = False) -> tuple[dict[str, Any], bool]:
    """The request with store_memory added when this agent and request may have it. `turn`: the
    user turn's `TurnBlock`; a call that `continues` it goes without the tool when its first call
    did (an agent framework that forces a tool call first, then lets the model choose, would
    otherwise change the tool list — and lose the provider's cache — in the middle of the loop)."""
    opted_in = ctx.memory is not None and TOOL_NAME in ctx.memory.tools
    withheld = getattr(turn, "withheld", None)
    if continues and opted_in and withheld:
        reason: str | None = f"withheld from this turn's first call ({withheld.get('reason')})"
    else:
        reason = why_not(fmt_name, body, opted_in)
        if reason is not None and opted_in and withheld is not None and not continues:
            withheld["reason"] = reason
    if reason is None:
        return offer(fmt_name, body, global_granted="global" in ctx.memory.grants), True
    if opted_in:
        state.telemetry.info("memory_tool_not_offered", agent_id=ctx.agent_id, tool=TOOL_NAME, reason=reason)
    return body, False


async def relay_whole(*, request: web.Request, state: Any, ctx: Any, fmt: Any, body: dict[str, Any],
                      upstream: Any, resend: Callable[[dict[str, Any]], Awaitable[tuple[int, bytes]]],
                      finish: Callable[[dict[str, Any]], Awaitable[None]],
                      whole_record: Callable[[Any, bytes], dict[str, Any]], said: dict[str, str],
                      session_id: str | None, turn_id: str, read: Callable[[], Awaitable[bytes]]) -> web.Response:
    data = await read()
    headers = {**returned_headers(upstream.headers), **said}
    doc = _sendable(data) if 200 <= upstream.status < 300 else None
    if doc is None:  # an error, not JSON, or too deep to send back: relayed as it came
        if 200 <= upstream.status < 300:
            await finish(whole_record(fmt, data))
        return web.Response(status=upstream.status, body=data, headers=headers)
    answers, final, note = await _rounds(fmt.name, body, doc, resend,
                                         TurnWrites.of(state, ctx, session_id, turn_id, body))
    final = hide_tool(fmt.name, final)
    if final is doc:
        await finish(whole_record(fmt, data))
        return web.Response(status=upstream.status, body=data, headers=headers)
    if len(answers) > 1:
        final = {**final, "usage": summed_usage([a.get("usage") for a in answers])}
    out = orjson.dumps(final)
    record = whole_record(fmt, out)
    if not record["response"].get("truncated"):  # past the ledger's cap its head alone is kept (turn/answer_cap.py)
        record["response"]["provider_answers"] = answers
    if note:
        record["response"]["memory_tool_note"] = note
    await finish(record)
    return web.Response(status=upstream.status, body=out, headers=headers)


def _sendable(data: bytes) -> dict[str, Any] | None:
    """The answer as a JSON object memplane can send back to the provider, or None."""
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) and nests_safely(doc) else None


async def _rounds(fmt_name: str, body: dict[str, Any], doc: dict[str, Any],
                  resend: Callable[[dict[str, Any]], Awaitable[tuple[int, bytes]]],
                  store_one: Callable[[Any, Any], Awaitable[tuple[bool, str]]]
                  ) -> tuple[list[dict[str, Any]], dict[str, Any], str | None]:
    """Store, hand the results back, again while an answer holds only store_memory calls: every
    provider answer, the final one, and why memplane stopped handing results back, if it did."""
    answers, final, note = [doc], doc, None
    for extra in range(MAX_EXTRA_CALLS + 1):
        mine, others = calls(fmt_name, final)
        if not mine:
            break
        results = {c.id: await store_one(c.arguments, final) for c in mine}
        if others or extra == MAX_EXTRA_CALLS:
            final = without_calls(fmt_name, final)
            note = None if others else f"stopped after {MAX_EXTRA_CALLS} extra provider calls"
            break
        body = follow_up(fmt_name, body, final, results)
        status, nxt, raw = await _again(resend, body)
        if nxt is None:  # the stores are done; the agent still gets an answer, without our calls
            final = without_calls(fmt_name, final)
            note = f"follow-up call failed (status {status}): {raw[:300].decode('utf-8', 'replace')}"
            break
        answers.append(nxt)
        final = nxt
    return answers, final, note


async def _again(resend: Callable[[dict[str, Any]], Awaitable[tuple[int, bytes]]], body: dict[str, Any]
                 ) -> tuple[int, dict[str, Any] | None, bytes]:
    """One more provider call with the results: (status, the answer if it can be sent on, raw bytes)."""
    try:
        status, raw = await resend(body)
        nxt = orjson.loads(raw) if 200 <= status < 300 else None
    except (TransportError, orjson.JSONDecodeError) as exc:
        return 0, None, str(exc).encode()
    return status, nxt if isinstance(nxt, dict) and nests_safely(nxt) else None, raw
