"""One agent turn through the proxy, top to bottom: the steps, in order (docs/turn.md).

read → scope → recall → inject → note taint → explain → offer → prepare → forward → relay → record → log.
Each step is `step(turn)` on one `Turn` value (value.py); the larger ones have a module of their name.
"""

from __future__ import annotations

import time

from aiohttp import web

from .. import memory_tool
from ..coding.reading import read_turn
from ..errors import ProxyError
from ..formats import WireFormat
from ..state import ProxyState
from .forward import forward, prepare
from .inject import inject
from .read import read
from .recall import recall
from .relay import relay
from .report import coding_detail, explain
from .value import Turn


async def handle_turn(request: web.Request, fmt: WireFormat, state: ProxyState) -> web.StreamResponse:
    """The route's handler: the turn, counted (active turns, turns by format and status)."""
    state.active_turns += 1
    status = 500
    try:
        resp = await run(Turn(request, fmt, state))
        status = resp.status
        return resp
    except ProxyError as err:
        status = err.status
        raise
    finally:
        state.active_turns -= 1
        state.metrics.child(state.metrics.turns, fmt.name, str(status)).inc()


async def run(turn: Turn) -> web.StreamResponse:
    """The turn, top to bottom (docs/turn.md has each step's module and job)."""
    await read(turn)  # who calls; the request, its thread expanded, checked
    await scope(turn)  # the coding read: the call's kind, its project, the person's words
    await recall_and_inject(turn)  # memories for this call, one block in the request
    note_taint(turn)  # whether untrusted text is in play, for store_memory here and over /mcp
    explain(turn)  # the turn's explanation, before the provider is paid
    offer(turn)  # store_memory, for agents that opt in
    prepare(turn)  # the provider's body, address and headers
    resp = await forward(turn, relay)  # the provider call; `relay` answers the agent, then records the turn
    log(turn)
    return resp


async def scope(turn: Turn) -> None:
    """The coding read, for an agent with memory (coding/reading.py)."""
    if turn.ctx.memory is not None:
        turn.coding = await read_turn(turn.state, turn.ctx, turn.request.headers, turn.body, turn.session_id)


async def recall_and_inject(turn: Turn) -> None:
    """Recall, then inject, in the trace's `memplane.recall` span; the coding read joins the explanation."""
    if turn.coding is None or not turn.recalls:
        return
    with turn.state.tracing.step("memplane.recall"):
        await inject(turn, await recall(turn))
        coding_detail(turn.recall.detail, turn.coding)


def note_taint(turn: Turn) -> None:
    """The turn's taint (tool output in its request or conversation, bounded text in its block), noted
    for the proxy's own store_memory and for MCP writes in the same conversation (turn_taint.py)."""
    turn.state.turn_taint.note(turn.ctx, turn.session_id, turn.turn_id, turn.body, turn.block)


def offer(turn: Turn) -> None:
    """The store_memory tool, opt-in (memory.json `tools`); a continuation goes as its first call went."""
    turn.effective, turn.store_tool = memory_tool.offered(turn.state, turn.ctx, turn.fmt.name, turn.effective,
                                                          turn.block, continues=turn.recall.status == "reused")


def log(turn: Turn) -> None:
    """The turn's `request` event."""
    assert turn.upstream is not None
    turn.state.telemetry.request(agent_id=turn.agent_id, path=turn.request.path, status_code=turn.upstream.status,
                                 stream=turn.stream, latency_ms=round((time.perf_counter() - turn.started) * 1000, 3))
