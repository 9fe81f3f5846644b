"""Wiring for more than one proxy (`--ledger redis`): the shared ledger, retain consumer group, rate
limiter, explanations and turn blocks, all on one Redis (see docs/DESIGN.md, "More than one proxy")."""

from __future__ import annotations

from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry

from ..agent_shares import AgentShares
from ..config import ProxySettings
from ..context_store import ContextStore
from ..forward_policy import parse_allow_list
from ..ledger.redis_streams import RedisLedger
from ..operator.metrics import ProxyMetrics
from ..retain.delivery_redis import StreamRetainDelivery
from ..state import ProxyState
from .shared_state import RedisExplanations, RedisRateLimiter, RedisThreads, RedisTurnBlocks, shared_writer


def shared_state_for(settings: ProxySettings, telemetry: Telemetry, metrics: ProxyMetrics) -> ProxyState:
    ledger = RedisLedger(settings.redis_url or "redis://127.0.0.1:6379/0", settings.history_root,
                         prefix=settings.ledger_prefix)
    writer = shared_writer(ledger.aio, telemetry)
    return ProxyState(
        settings=settings,
        telemetry=telemetry,
        contexts=ContextStore(settings.context_root, telemetry),
        ledger=ledger,  # type: ignore[arg-type]  # the same calls, stream ids for offsets
        redactor=Redactor.from_file(settings.redaction_rules),
        rate_limiter=RedisRateLimiter(ledger.aio, settings.rate_limit_per_agent, settings.rate_limit_burst,  # type: ignore[arg-type]
                                      telemetry, prefix=settings.ledger_prefix),
        upstream_slots=AgentShares(settings.max_concurrent_upstream, settings.max_concurrent_upstream_per_agent),
        passthrough=parse_allow_list(settings.passthrough),
        metrics=metrics,
        explanations=RedisExplanations(writer, prefix=settings.ledger_prefix),
        turn_blocks=RedisTurnBlocks(writer, prefix=settings.ledger_prefix),
        threads=RedisThreads(writer, prefix=settings.ledger_prefix),
    )


def stream_delivery(state: ProxyState, settings: ProxySettings) -> StreamRetainDelivery:
    assert state.session is not None
    delivery = StreamRetainDelivery(state.session, state.telemetry, state.redactor, state.ledger,  # type: ignore[arg-type]
                                    state.contexts, claim_idle_s=settings.retain_claim_idle_s,
                                    batch=settings.retain_batch_call, max_in_flight=settings.retain_max_in_flight,
                                    linger_s=settings.retain_linger_s)
    writer = getattr(state.explanations, "writer", None)
    if writer is not None:
        delivery.on_close = writer.drain  # what is still queued for Redis goes before the process does
    return delivery
