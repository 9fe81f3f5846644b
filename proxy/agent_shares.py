"""Work the agents share — calls to the provider, redaction of large requests — with a limit for
the proxy and a share of it per agent.

Why a share: one agent that opens hundreds of slow calls (a runaway loop, a batch job) would
otherwise hold every slot, and every other agent's call would wait behind calls that are not
theirs — for as long as the provider's read timeout. Likewise eight multi-megabyte requests of one
agent, redacted on worker threads, would take every worker. With a share, an agent's extra work
waits for that agent's own slots; the rest stay free for the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


REQUEST_WORK = 64  # turns redacting their request at once, all agents together
REQUEST_WORK_PER_AGENT = 2  # and one agent's: the default executor has a handful of workers (cpu + 4)


def default_share(total: int) -> int:
    """A quarter of the slots: room for a busy agent, and three like it, before anyone waits."""
    return max(1, total // 4)


class AgentShares:
    """`async with shares.held(agent_id):` around one piece of shared work (one provider call)."""

    def __init__(self, total: int, per_agent: int | None = None) -> None:
        self.total = max(1, total)
        self.per_agent = max(1, min(self.total, per_agent or default_share(self.total)))
        self._all = asyncio.Semaphore(self.total)
        self._agents: dict[str, asyncio.Semaphore] = {}
        self._users: dict[str, int] = {}  # calls of the agent holding or waiting: its semaphore lives while > 0

    @asynccontextmanager
    async def held(self, agent_id: str) -> AsyncIterator[None]:
        own = self._agents.setdefault(agent_id, asyncio.Semaphore(self.per_agent))
        self._users[agent_id] = self._users.get(agent_id, 0) + 1
        try:
            async with own, self._all:
                yield
        finally:
            self._users[agent_id] -= 1
            if not self._users[agent_id]:  # no call of this agent is left: forget it (ids are unbounded)
                del self._users[agent_id]
                del self._agents[agent_id]
