"""Build the embedded adapter's aiohttp app: contract endpoints, batched retain, REST API."""

from __future__ import annotations

import os
from pathlib import Path

from aiohttp import web

from memplane_core.contract import describe
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry

from ..admission import DEFAULT_MAX_RETAINS_IN_FLIGHT
from ..engine.dense import load_embedder
from ..rest_api import add_api_routes
from ..server import AgentToken, build_adapter_app
from .service import EmbeddedMemory
from .sqlite_store import SQLiteStore

EMBEDDED_SERVICE = web.AppKey("embedded_service", EmbeddedMemory)


def build_embedded_app(data_dir: Path, *, redactor: Redactor, telemetry: Telemetry, token: str | None = None,
                       agent_tokens: dict[str, AgentToken] | None = None,
                       embeddings: str | None = None, encoder_threads: int | None = None,
                       max_retains_in_flight: int = DEFAULT_MAX_RETAINS_IN_FLIGHT) -> web.Application:
    """`embeddings`: 'auto' (the shipped MiniLM) or 'off'; default from MEMPLANE_EMBEDDINGS.
    `encoder_threads`: ONNX Runtime threads for MiniLM; default from MEMPLANE_ENCODER_THREADS, else 1.
    `max_retains_in_flight`: retain calls in hand before the next is answered 503 + Retry-After."""
    mode = embeddings or os.environ.get("MEMPLANE_EMBEDDINGS", "auto")
    threads = encoder_threads or int(os.environ.get("MEMPLANE_ENCODER_THREADS") or 1)
    service = EmbeddedMemory(SQLiteStore(Path(data_dir)), redactor, telemetry)
    app = build_adapter_app(service, describe(retain_batch=True), token=token, agent_tokens=agent_tokens,
                            max_retains_in_flight=max_retains_in_flight)
    add_api_routes(app, service)
    app[EMBEDDED_SERVICE] = service

    async def start(app: web.Application) -> None:
        await service.start(embedder=await load_embedder(mode, telemetry, threads))

    async def stop(app: web.Application) -> None:
        await service.close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app
