"""Build the embedded adapter's aiohttp app: contract endpoints, batched retain, REST API."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from aiohttp import web

from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry

from ..engine.curator import CuratorSettings
from ..engine.dense import load_embedder
from ..engine.heap import HEAP
from ..engine.schedule import RecallScheduler
from ..http.admission import DEFAULT_MAX_RETAINS_IN_FLIGHT
from ..http.auth import AgentToken
from ..http.store_app import build_store_app
from .config import EmbeddedSettings
from .service import EmbeddedMemory
from .sqlite_store import SQLiteStore

EMBEDDED_SERVICE = web.AppKey("embedded_service", EmbeddedMemory)


def build_embedded_app(data_dir: Path, *, redactor: Redactor, telemetry: Telemetry, token: str | None = None,
                       agent_tokens: dict[str, AgentToken] | None = None, settings: EmbeddedSettings | None = None,
                       embeddings: str | None = None, encoder_threads: int | None = None,
                       max_retains_in_flight: int = DEFAULT_MAX_RETAINS_IN_FLIGHT,
                       curator: CuratorSettings | None = None,
                       max_memories_per_agent: int | None = None, recalls_per_agent: int | None = None,
                       embedder: Any = None, shared: bool = False, first: bool = True) -> web.Application:
    """`settings`: the adapter's settings, built by the caller (the CLI: `EmbeddedSettings.from_env()`
    and its flags); none given means the documented defaults — a builder never reads the
    environment. The keyword arguments of the same names override them.
    `max_retains_in_flight`: retain calls in hand before the next is answered 503 + Retry-After.
    `curator`: the LLM curator's settings (default: MEMPLANE_CURATOR_*; off unless set).
    `embedder`: an `engine.dense.Embedder` to use instead of loading the packaged model.
    `shared`: one of several processes serving this store (`--workers N`): writes are logged for the
    others and theirs applied; `first`: the one of them that embeds what it finds without a vector."""
    s = EmbeddedSettings() if settings is None else settings
    overrides = {"embeddings": embeddings, "encoder_threads": encoder_threads,
                 "max_memories_per_agent": max_memories_per_agent, "recalls_per_agent": recalls_per_agent}
    s = replace(s, **{k: v for k, v in overrides.items() if v is not None})
    service = EmbeddedMemory(SQLiteStore(Path(data_dir), writer=f"pid{os.getpid()}" if shared else None),
                             redactor, telemetry, max_memories_per_agent=s.max_memories_per_agent,
                             scheduler=RecallScheduler(per_agent=s.recalls_per_agent), embeds_loaded=first)

    async def start() -> None:
        await service.start(embedder=embedder if embedder is not None
                            else await load_embedder(s.embeddings, telemetry, s.encoder_threads))
        HEAP.freeze()  # what start-up made (modules, the encoder, loaded indexes) lives as long as we do

    app = build_store_app(service, telemetry, start=start, curator=curator, token=token, agent_tokens=agent_tokens,
                          max_retains_in_flight=max_retains_in_flight)
    app[EMBEDDED_SERVICE] = service
    return app
