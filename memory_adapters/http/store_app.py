"""A store's whole app, as embedded and tiered serve it: the contract routes, the REST API, the
curator's usage, and the curator's life tied to the store's (started after it, stopped before it)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from memplane_core.contract import describe
from memplane_core.telemetry import Telemetry

from ..engine.curator import CuratorSettings, build_curator
from .admission import DEFAULT_MAX_RETAINS_IN_FLIGHT
from .auth import AgentToken
from .curator_api import add_curator_routes
from .rest_api import add_api_routes
from .server import build_adapter_app


def build_store_app(service: Any, telemetry: Telemetry, *, start: Callable[[], Awaitable[None]],
                    curator: CuratorSettings | None = None, token: str | None = None,
                    agent_tokens: dict[str, AgentToken] | None = None,
                    max_retains_in_flight: int = DEFAULT_MAX_RETAINS_IN_FLIGHT) -> web.Application:
    """`service`: a store offering the contract and `MemoryRest`, with `close()`; `start`: what
    the store does before it serves (load indexes, start background work); `curator`: the
    curator's settings, built by the caller (the CLI reads `MEMPLANE_CURATOR_*`); none: no curator."""
    service.curator = build_curator(service, telemetry, CuratorSettings() if curator is None else curator)
    service.metric_collectors = service.curator.metrics.collectors() if service.curator else ()
    app = build_adapter_app(service, describe(retain_batch=True), token=token, agent_tokens=agent_tokens,
                            max_retains_in_flight=max_retains_in_flight)
    add_api_routes(app, service)
    add_curator_routes(app, service.curator)

    async def on_startup(app: web.Application) -> None:
        await start()
        if service.curator is not None:
            service.curator.start()

    async def on_cleanup(app: web.Application) -> None:
        if service.curator is not None:
            await service.curator.stop()
        await service.close()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app
