"""What the curator spent, per agent and UTC day, and whether it may spend more today.

Kept in process memory: a restart starts the day's count again (documented in DESIGN.md).
The per-agent numbers are served as JSON (`GET /curator/usage`), never as Prometheus labels:
agent ids are unbounded; /metrics carries the totals (metrics.py).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timezone


def utc_day(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%d")


@dataclass
class AgentUsage:
    day: str
    calls_today: int = 0
    tokens_today: int = 0
    calls_total: int = 0
    tokens_total: int = 0
    prompt_tokens_total: int = 0
    completion_tokens_total: int = 0
    invalid_total: int = 0
    failed_total: int = 0
    paused: bool = False  # today's budget is spent


class Budget:
    def __init__(self, daily_tokens: int, clock: Callable[[], float] = time.time) -> None:
        self.daily_tokens = daily_tokens
        self.clock = clock
        self._usage: dict[str, AgentUsage] = {}

    def _of(self, agent_id: str) -> AgentUsage:
        today = utc_day(self.clock())
        u = self._usage.get(agent_id)
        if u is None:
            u = self._usage[agent_id] = AgentUsage(day=today)
        elif u.day != today:  # a new day: the daily count starts again
            u.day, u.calls_today, u.tokens_today, u.paused = today, 0, 0, False
        return u

    def allows(self, agent_id: str) -> bool:
        """False once today's tokens are spent; the first refusal of the day marks the agent paused."""
        u = self._of(agent_id)
        if self.daily_tokens > 0 and u.tokens_today >= self.daily_tokens:
            u.paused = True
            return False
        return True

    def newly_paused(self, agent_id: str) -> bool:
        """True exactly once per day, when the agent's budget runs out (the moment to log it)."""
        u = self._of(agent_id)
        was = u.paused
        return not self.allows(agent_id) and not was

    def charge(self, agent_id: str, prompt_tokens: int, completion_tokens: int) -> None:
        u = self._of(agent_id)
        tokens = prompt_tokens + completion_tokens
        u.calls_today += 1
        u.calls_total += 1
        u.tokens_today += tokens
        u.tokens_total += tokens
        u.prompt_tokens_total += prompt_tokens
        u.completion_tokens_total += completion_tokens

    def invalid(self, agent_id: str) -> None:
        self._of(agent_id).invalid_total += 1

    def failed(self, agent_id: str) -> None:
        self._of(agent_id).failed_total += 1

    def paused_agents(self) -> int:
        today = utc_day(self.clock())
        return sum(1 for u in self._usage.values() if u.paused and u.day == today)

    def report(self, agent_id: str | None = None) -> dict[str, dict]:
        ids = [agent_id] if agent_id is not None else sorted(self._usage)
        out = {}
        for a in ids:
            u = self._of(a)
            out[a] = {**asdict(u), "daily_tokens": self.daily_tokens,
                      "tokens_left_today": max(0, self.daily_tokens - u.tokens_today) if self.daily_tokens else None}
        return out
