"""The forward step: the request made ready for the provider and sent with the operator's key (or
the agent's own), under the agent's share of provider calls; the relay step answers inside it."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import orjson
from aiohttp import web

from ..turn_blocks import offers_tools
from ..upstream import upstream_headers, upstream_target
from .provider import open_upstream
from .value import Turn


def prepare(turn: Turn) -> None:
    """The provider's body (e.g. a usage chunk asked for), its address and headers."""
    state, fmt = turn.state, turn.fmt
    turn.effective, turn.hidden_usage = fmt.prepare_upstream(turn.effective)
    turn.url = upstream_target(state.settings, fmt.provider, fmt.upstream_path)
    turn.headers = upstream_headers(state.settings, fmt.provider, turn.request.headers,
                                    client_key=turn.ctx.metadata.client_provider_key)  # the agent's own, or operator's
    turn.chained = fmt.chains and turn.block is not None and offers_tools(turn.body)


async def forward(turn: Turn, relay: Callable[[Turn], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
    """Call the provider and `relay` its answer while the call is open."""
    state = turn.state
    await state.ledger.ready(turn.agent_id)  # a turn that could not be recorded is refused before it is paid for
    async with state.upstream_slots.held(turn.agent_id), state.tracing.upstream(turn.fmt.provider, turn.effective,
                                                                                turn.url):
        sent = time.perf_counter()
        turn.upstream = await open_upstream(state, "POST", turn.url, data=orjson.dumps(turn.effective),
                                            headers=turn.headers,
                                            params=turn.request.query or None)  # e.g. the anthropic SDK's ?beta=true
        state.metrics.upstream_latency.observe(time.perf_counter() - sent)
        async with turn.upstream:
            return await relay(turn)
