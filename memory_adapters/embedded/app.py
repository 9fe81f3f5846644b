"""Build the embedded adapter's aiohttp app: contract endpoints, batched retain, REST API."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from aiohttp import web

from memplane_core.contract import describe
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry

from ..admission import DEFAULT_MAX_RETAINS_IN_FLIGHT
from ..engine.schedule import RecallScheduler, per_agent_from_env
from ..rest_api import add_api_routes
from ..server import AgentToken, build_adapter_app
from .service import EmbeddedMemory
from .sqlite_store import SQLiteStore

EMBEDDED_SERVICE = web.AppKey("embedded_service", EmbeddedMemory)


async def load_embedder(mode: str, telemetry: Telemetry):
    """MiniLM when the embeddings extra is installed and `mode` is not 'off'; else None (words only)."""
    if mode == "off":
        telemetry.info("embeddings_off", detail="dense embeddings disabled; lexical recall only")
        return None
    try:
        from ..engine.dense import Embedder
        embedder = await asyncio.to_thread(Embedder.load)
    except Exception as exc:  # ImportError without the extra, or a broken install
        telemetry.warning("embeddings_unavailable", error=f"{type(exc).__name__}: {exc}"[:300],
                          detail="pip install 'memplane[embeddings]' for hybrid recall; lexical only")
        return None
    telemetry.info("embeddings_on", model="all-MiniLM-L6-v2", dim=embedder.dim, engine=embedder.engine)
    return embedder


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
                       embeddings: str | None = None,
                       max_retains_in_flight: int = DEFAULT_MAX_RETAINS_IN_FLIGHT,
                       max_memories_per_agent: int | None = None, recalls_per_agent: int | None = None,
                       embedder: Any = None) -> web.Application:
    """`embeddings`: 'auto' (on when installed) or 'off'; default from MEMPLANE_EMBEDDINGS.
    `max_retains_in_flight`: retain calls in hand before the next is answered 503 + Retry-After.
    `max_memories_per_agent`: past it an agent's oldest episodes are evicted (default
    MEMPLANE_MAX_MEMORIES_PER_AGENT, 0: never). `recalls_per_agent`: one agent's recalls in hand at
    once, the rest wait their turn (MEMPLANE_RECALLS_PER_AGENT, default 4). `embedder`: an
    `engine.dense.Embedder` to use instead of loading the packaged model."""
    mode = embeddings or os.environ.get("MEMPLANE_EMBEDDINGS", "auto")
    if max_memories_per_agent is None:
        max_memories_per_agent = _env_int("MEMPLANE_MAX_MEMORIES_PER_AGENT", 0)
    if recalls_per_agent is None:
        recalls_per_agent = per_agent_from_env()
    service = EmbeddedMemory(SQLiteStore(Path(data_dir)), redactor, telemetry,
                             max_memories_per_agent=max_memories_per_agent,
                             scheduler=RecallScheduler(per_agent=recalls_per_agent))
    app = build_adapter_app(service, describe(retain_batch=True), token=token, agent_tokens=agent_tokens,
                            max_retains_in_flight=max_retains_in_flight)
    add_api_routes(app, service)
    app[EMBEDDED_SERVICE] = service

    async def start(app: web.Application) -> None:
        await service.start(embedder=embedder if embedder is not None else await load_embedder(mode, telemetry))

    async def stop(app: web.Application) -> None:
        await service.close()

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    return app
