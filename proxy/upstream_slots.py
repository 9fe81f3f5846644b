"""Calls to the provider at once: a limit for the proxy, and a share of it per agent.

Why a share: one agent that opens hundreds of slow calls (a runaway loop, a batch job) would
otherwise hold every slot, and every other agent's call would wait behind calls that are not
theirs — for as long as the provider's read timeout. With a share, an agent's extra calls wait
for that agent's own slots; the rest stay free for the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager


def default_share(total: int) -> int:
    """A quarter of the slots: room for a busy agent, and three like it, before anyone waits."""
    return max(1, total // 4)


class UpstreamSlots:
    """`async with slots.held(agent_id):` around one provider call."""

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
