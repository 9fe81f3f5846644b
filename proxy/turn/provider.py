"""Calls to the provider: the turn's one call, and the extra calls of the same turn the memory tool
makes (store_memory results handed back). Transport failures become memplane's errors here."""

from __future__ import annotations

from typing import Any

import aiohttp
import orjson
from yarl import URL

from ..state import ProxyState
from ..transport_errors import provider_errors, transport_errors
from .value import Turn


def upstream_timeout(state: ProxyState) -> aiohttp.ClientTimeout:
    s = state.settings
    return aiohttp.ClientTimeout(total=None, sock_connect=s.upstream_connect_timeout_s,
                                 sock_read=s.upstream_read_timeout_s)


async def open_upstream(state: ProxyState, method: str, url: str | URL, *, data: bytes | None,
                        headers: dict[str, str], params: Any = None) -> aiohttp.ClientResponse:
    assert state.session is not None
    with provider_errors():
        return await state.session.request(method, url, data=data, headers=headers, params=params,
                                           timeout=upstream_timeout(state), allow_redirects=False)


async def read_answer(upstream: aiohttp.ClientResponse) -> bytes:
    with provider_errors(answering=True):
        return await upstream.read()


def reopen(turn: Turn, body: dict[str, Any]) -> Any:
    """A streamed provider call of the same turn (memory_tool: the store_memory results handed back)."""
    state = turn.state
    assert state.session is not None
    return state.session.request("POST", turn.url, data=orjson.dumps(body), headers=turn.headers,
                                 params=turn.request.query or None, timeout=upstream_timeout(state),
                                 allow_redirects=False)


async def resend(turn: Turn, body: dict[str, Any]) -> tuple[int, bytes]:
    """One more provider call of the same turn (memory_tool: the store_memory results handed back)."""
    state = turn.state
    assert state.session is not None
    with transport_errors():  # a TransportError: memory_tool answers the agent without the follow-up
        async with state.session.request("POST", turn.url, data=orjson.dumps(body), headers=turn.headers,
                                         params=turn.request.query or None, timeout=upstream_timeout(state),
                                         allow_redirects=False) as again:
            return again.status, await again.read()
