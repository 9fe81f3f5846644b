"""Build the tiered adapter's aiohttp app: contract endpoints, REST API, lifecycle."""

from __future__ import annotations

import asyncio
import os

from aiohttp import web

from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry

from ..engine.curator import CuratorSettings
from ..engine.heap import HEAP
from ..http.errors import json_error
from ..http.store_app import build_store_app
from .config import TieredSettings
from .consolidate import consolidate
from .ltm import LTMUnavailable, MongoLTM
from .service import TieredMemory
from .stm import RedisSTM

TIERED_SERVICE = web.AppKey("tiered_service", TieredMemory)
LTM_RETRY_AFTER_S = 2  # MongoDB away: ask callers to come back after a server selection would have failed


@web.middleware
async def ltm_unavailable_middleware(request: web.Request, handler):
    """MongoDB down: a clear 503, never a traceback; nothing was half-written (Mongo goes first)."""
    try:
        return await handler(request)
    except LTMUnavailable:
        return json_error(503, "long-term memory store (MongoDB) is unavailable; nothing was stored",
                          retry_after_s=LTM_RETRY_AFTER_S)


def build_service(settings: TieredSettings, telemetry: Telemetry, redactor: Redactor) -> TieredMemory:

    def on_redis(ok: bool, error: str) -> None:
        if ok:
            telemetry.info("stm_available", detail="Redis is back; short-term memory in use again")
        else:
            telemetry.warning("stm_unavailable", error=error,
                              detail="Redis unreachable; serving from MongoDB until it returns")

    stm = RedisSTM(settings.redis_url, max_entries=settings.stm_max_entries, prefix=settings.key_prefix,
                   on_state=on_redis)
    return TieredMemory(settings, MongoLTM(settings.mongo_url), stm, telemetry=telemetry, redactor=redactor)


def build_tiered_app(settings: TieredSettings, telemetry: Telemetry, redactor: Redactor,
                     service: TieredMemory | None = None, curator: CuratorSettings | None = None) -> web.Application:
    """`service`: an already built one (tests build it to reach its parts); else one from `settings`.
    `curator`: the LLM curator's settings (default: MEMPLANE_CURATOR_*; off unless set)."""
    if service is None:
        service = build_service(settings, telemetry, redactor)

    async def start() -> None:
        await service.start()
        HEAP.freeze()  # what start-up made (modules, the encoder, warmed indexes) lives as long as we do
        # several workers of one service (`--workers N`): one of them consolidates, not N at once
        if settings.consolidate_every_s > 0 and os.environ.get("MEMPLANE_WORKER", "0") == "0":
            service.spawn(_consolidate_every(service, settings.consolidate_every_s))

    app = build_store_app(service, telemetry, start=start, curator=curator, token=settings.adapter_token,
                          agent_tokens=settings.agent_tokens, max_retains_in_flight=settings.max_retains_in_flight)
    app.middlewares.append(ltm_unavailable_middleware)
    app[TIERED_SERVICE] = service
    return app


async def _consolidate_every(service: TieredMemory, period_s: float) -> None:
    """Periodic consolidation; a failed round is logged and the next one comes."""
    while True:
        await asyncio.sleep(period_s)
        try:
            report = await consolidate(service)
            service.telemetry.info("consolidation", merged=len(report.merged), pruned=len(report.pruned))
        except Exception as exc:  # keep the loop alive
            service.telemetry.warning("consolidation_failed", error=type(exc).__name__)
