"""Build the embedded adapter's aiohttp app: contract endpoints, batched retain, REST API."""

from __future__ import annotations

import os
from pathlib import Path

from aiohttp import web

from memplane_core.contract import describe
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry

from ..engine.curator import CuratorSettings, build_curator
from ..engine.dense import load_embedder
from ..http.admission import DEFAULT_MAX_RETAINS_IN_FLIGHT
from ..http.auth import AgentToken
from ..http.curator_api import add_curator_routes
from ..http.rest_api import add_api_routes
from ..http.server import build_adapter_app
from .service import EmbeddedMemory
from .sqlite_store import SQLiteStore

EMBEDDED_SERVICE = web.AppKey("embedded_service", EmbeddedMemory)


def build_embedded_app(data_dir: Path, *, redactor: Redactor, telemetry: Telemetry, token: str | None = None,
                       agent_tokens: dict[str, AgentToken] | None = None,
                       embeddings: str | None = None, encoder_threads: int | None = None,
                       max_retains_in_flight: int = DEFAULT_MAX_RETAINS_IN_FLIGHT,
                       curator: CuratorSettings | None = None) -> web.Application:
    """`embeddings`: 'auto' (the shipped MiniLM) or 'off'; default from MEMPLANE_EMBEDDINGS.
    `encoder_threads`: ONNX Runtime threads for MiniLM; default from MEMPLANE_ENCODER_THREADS, else 1.
    `max_retains_in_flight`: retain calls in hand before the next is answered 503 + Retry-After.
    `curator`: the LLM curator's settings (default: MEMPLANE_CURATOR_*; off unless set)."""
    mode = embeddings or os.environ.get("MEMPLANE_EMBEDDINGS", "auto")
    threads = encoder_threads or int(os.environ.get("MEMPLANE_ENCODER_THREADS") or 1)
    service = EmbeddedMemory(SQLiteStore(Path(data_dir)), redactor, telemetry)
    service.curator = build_curator(service, telemetry, curator)
    service.metric_collectors = service.curator.metrics.collectors() if service.curator else ()
    app = build_adapter_app(service, describe(retain_batch=True), token=token, agent_tokens=agent_tokens,
                            max_retains_in_flight=max_retains_in_flight)
    add_api_routes(app, service)
    add_curator_routes(app, service.curator)
    app[EMBEDDED_SERVICE] = service

    async def start(app: web.Application) -> None:
        await service.start(embedder=await load_embedder(mode, telemetry, threads))
        if service.curator is not None:
            service.curator.start()

    async def stop(app: web.Application) -> None:
        if service.curator is not None:
            await service.curator.stop()
        await service.close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app
