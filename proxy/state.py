"""Everything a request handler needs, built once per app and passed in explicitly."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import aiohttp

from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry

from .agent_shares import REQUEST_WORK, REQUEST_WORK_PER_AGENT, AgentShares
from .coding.scaffolding import Recurrence
from .coding.sessions import SessionBook
from .config import ProxySettings
from .context_store import ContextStore
from .forward_policy import DEFAULT_PASSTHROUGH, Rule, parse_allow_list
from .ledger.files import Ledger
from .memory_service import RecallDeadlines
from .operator.explain import TurnExplanations
from .operator.metrics import ProxyMetrics
from .operator.recall_history import RecallHistory
from .rate_limit import RateLimiter
from .response_owners import ResponseOwners
from .retain.delivery import RetainDelivery
from .threads import Threads
from .tracing import Tracing
from .turn_blocks import TurnBlocks
from .turn_taint import TurnTaint


@dataclass
class ProxyState:
    settings: ProxySettings
    telemetry: Telemetry
    contexts: ContextStore
    ledger: Ledger
    redactor: Redactor
    rate_limiter: RateLimiter
    upstream_slots: AgentShares
    passthrough: tuple[Rule, ...] = parse_allow_list(DEFAULT_PASSTHROUGH)
    metrics: ProxyMetrics = field(default_factory=ProxyMetrics)
    explanations: TurnExplanations = field(default_factory=TurnExplanations)
    turn_blocks: TurnBlocks = field(default_factory=TurnBlocks)  # one block per user turn
    threads: Threads = field(default_factory=Threads)  # Anthropic message threads of agents with memory
    recall_deadlines: RecallDeadlines = field(default_factory=RecallDeadlines)  # deadline_ms per agent and service
    # redacting a turn's request (large ones go to worker threads): a share per agent
    request_work: AgentShares = field(default_factory=lambda: AgentShares(REQUEST_WORK, REQUEST_WORK_PER_AGENT))
    response_owners: ResponseOwners = field(default_factory=ResponseOwners)  # whose Responses answer an id is
    recall_history: RecallHistory = field(default_factory=RecallHistory)  # the inspector's recall charts
    tracing: Tracing = field(default_factory=Tracing)  # OpenTelemetry spans; off (no-ops) unless OTEL_* asks
    scaffolding: Recurrence = field(default_factory=Recurrence)  # client text that recurs across sessions
    coding_sessions: SessionBook = field(default_factory=SessionBook)  # agents' main calls (coding/sessions.py)
    turn_taint: TurnTaint = field(default_factory=TurnTaint)  # whether an agent's recent turn carried tool text
    session: aiohttp.ClientSession | None = None
    retain: RetainDelivery | None = None
    active_turns: int = 0

    async def settle(self, timeout: float = 10.0) -> None:
        """Wait until no turn is in flight and every queued retain was delivered (tests, demo)."""
        async def wait() -> None:
            while self.active_turns or (self.retain is not None and not self.retain.idle()):
                await asyncio.sleep(0.005)
        await asyncio.wait_for(wait(), timeout)
