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

    def held(self, agent_id: str) -> "_Held":
        return _Held(self, agent_id)


class _Held:
    """One hold of an agent's share and a proxy slot. A plain class, not an `asynccontextmanager`:
    a generator-based one cost more than the two semaphores it takes (it runs on every turn)."""

    __slots__ = ("shares", "agent_id", "own")

    def __init__(self, shares: AgentShares, agent_id: str) -> None:
        self.shares = shares
        self.agent_id = agent_id
        self.own: asyncio.Semaphore | None = None

    async def __aenter__(self) -> None:
        shares, agent_id = self.shares, self.agent_id
        own = shares._agents.get(agent_id)
        if own is None:
            own = shares._agents[agent_id] = asyncio.Semaphore(shares.per_agent)
        shares._users[agent_id] = shares._users.get(agent_id, 0) + 1
        try:
            await own.acquire()
            try:
                await shares._all.acquire()
            except BaseException:
                own.release()
                raise
        except BaseException:
            self._leave()
            raise
        self.own = own

    async def __aexit__(self, *exc: object) -> None:
        assert self.own is not None
        self.shares._all.release()
        self.own.release()
        self._leave()

    def _leave(self) -> None:
        users = self.shares._users
        users[self.agent_id] -= 1
        if not users[self.agent_id]:  # no call of this agent is left: forget it (ids are unbounded)
            del users[self.agent_id]
            del self.shares._agents[self.agent_id]
