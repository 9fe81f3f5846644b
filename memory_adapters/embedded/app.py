"""Build the embedded adapter's aiohttp app: contract endpoints, batched retain, REST API."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from aiohttp import web

from memplane_core.contract import describe
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry

from ..admission import DEFAULT_MAX_RETAINS_IN_FLIGHT
from ..curator_api import add_curator_routes
from ..engine.curator import CuratorSettings, build_curator
from ..engine.dense import load_embedder
from ..engine.schedule import RecallScheduler, per_agent_from_env
from ..rest_api import add_api_routes
from ..server import AgentToken, build_adapter_app
from .service import EmbeddedMemory
from .sqlite_store import SQLiteStore

EMBEDDED_SERVICE = web.AppKey("embedded_service", EmbeddedMemory)


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, not {raw!r}") from None
    if value < 0:
        raise ValueError(f"{name} must be 0 or more, not {value}")
    return value


def build_embedded_app(data_dir: Path, *, redactor: Redactor, telemetry: Telemetry, token: str | None = None,
                       agent_tokens: dict[str, AgentToken] | None = None,
                       embeddings: str | None = None, encoder_threads: int | None = None,
                       max_retains_in_flight: int = DEFAULT_MAX_RETAINS_IN_FLIGHT,
                       curator: CuratorSettings | None = None,
                       max_memories_per_agent: int | None = None, recalls_per_agent: int | None = None,
                       embedder: Any = None) -> web.Application:
    """`embeddings`: 'auto' (the shipped MiniLM) or 'off'; default from MEMPLANE_EMBEDDINGS.
    `encoder_threads`: ONNX Runtime threads for MiniLM; default from MEMPLANE_ENCODER_THREADS, else 1.
    `max_retains_in_flight`: retain calls in hand before the next is answered 503 + Retry-After.
    `curator`: the LLM curator's settings (default: MEMPLANE_CURATOR_*; off unless set).
    `max_memories_per_agent`: past it an agent's oldest episodes are evicted (default
    MEMPLANE_MAX_MEMORIES_PER_AGENT, 0: never). `recalls_per_agent`: one agent's recalls in hand at
    once, the rest wait their turn (MEMPLANE_RECALLS_PER_AGENT, default 4). `embedder`: an
    `engine.dense.Embedder` to use instead of loading the packaged model."""
    mode = embeddings or os.environ.get("MEMPLANE_EMBEDDINGS", "auto")
    threads = encoder_threads or int(os.environ.get("MEMPLANE_ENCODER_THREADS") or 1)
    if max_memories_per_agent is None:
        max_memories_per_agent = _env_int("MEMPLANE_MAX_MEMORIES_PER_AGENT", 0)
    if recalls_per_agent is None:
        recalls_per_agent = per_agent_from_env()
    service = EmbeddedMemory(SQLiteStore(Path(data_dir)), redactor, telemetry,
                             max_memories_per_agent=max_memories_per_agent,
                             scheduler=RecallScheduler(per_agent=recalls_per_agent))
    service.curator = build_curator(service, telemetry, curator)
    service.metric_collectors = service.curator.metrics.collectors() if service.curator else ()
    app = build_adapter_app(service, describe(retain_batch=True), token=token, agent_tokens=agent_tokens,
                            max_retains_in_flight=max_retains_in_flight)
    add_api_routes(app, service)
    add_curator_routes(app, service.curator)
    app[EMBEDDED_SERVICE] = service

    async def start(app: web.Application) -> None:
        await service.start(embedder=embedder if embedder is not None else await load_embedder(mode, telemetry, threads))
        if service.curator is not None:
            service.curator.start()

    async def stop(app: web.Application) -> None:
        if service.curator is not None:
            await service.curator.stop()
        await service.close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app
