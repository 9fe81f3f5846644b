"""One agent's retains that arrive while its last write is under way go together in the next one.

Why: a proxy without the batch endpoint configured sends each turn as its own `/retain`, several
of one agent's at once. Each was a whole write of its own — the idempotency lookups, the MongoDB
insert, the Redis pipeline, the version bump, the retained marks: some eight round trips a turn,
with the agent's other turns doing the same beside it. Grouped, a burst of turns costs the round
trips of one write (group commit, as the proxy's Redis ledger does with its appends).

A call alone is written at once (nothing waits for company). Each caller gets its own outcome; a
write that fails fails every call in it, and each caller's retry is deduplicated by entry id, so
at-least-once delivery holds as before. The write runs as its own task: a caller that gives up
(its connection closed) does not cut a write in half for the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from memplane_core.contract import RetainRequest

MAX_GROUP = 64  # entries written together at most (a batch call's 32 and a burst's singles)


def _retrieved(f: asyncio.Future) -> None:
    if not f.cancelled():
        f.exception()  # its caller gave up: the failure is not "never retrieved"


class RetainGroups:
    """Per agent: calls waiting for the next write, and the task writing."""

    def __init__(self, write: Callable[[list[RetainRequest]], Awaitable[list[str]]], max_group: int = MAX_GROUP) -> None:
        self._write = write
        self.max_group = max_group
        self._waiting: dict[str, list[tuple[RetainRequest, asyncio.Future]]] = {}
        self._writers: dict[str, asyncio.Task] = {}
        self.writes = 0  # group writes made (with `entries`: how much grouping there was; /health)
        self.entries = 0

    async def retain(self, reqs: list[RetainRequest]) -> list[str]:
        """Outcomes of `reqs` (all of one agent), in order, once they are written."""
        if not reqs:
            return []
        agent_id = reqs[0].agent_id
        loop = asyncio.get_running_loop()
        futures = [loop.create_future() for _ in reqs]
        for f in futures:
            f.add_done_callback(_retrieved)
        self._waiting.setdefault(agent_id, []).extend(zip(reqs, futures))
        if agent_id not in self._writers:
            self._writers[agent_id] = asyncio.create_task(self._drain(agent_id))
        return [await asyncio.shield(f) for f in futures]

    async def _drain(self, agent_id: str) -> None:
        group: list[tuple[RetainRequest, asyncio.Future]] = []
        try:
            while waiting := self._waiting.pop(agent_id, None):
                group, rest = waiting[:self.max_group], waiting[self.max_group:]
                if rest:
                    self._waiting[agent_id] = rest
                self.writes += 1
                self.entries += len(group)
                try:
                    outcomes = await self._write([r for r, _ in group])
                except Exception as exc:  # every call of the write fails; their retries are deduplicated
                    for _, f in group:
                        if not f.done():
                            f.set_exception(exc)
                    continue
                for (_, f), outcome in zip(group, outcomes):
                    if not f.done():
                        f.set_result(outcome)
        finally:
            self._writers.pop(agent_id, None)
            for _, f in [*group, *self._waiting.pop(agent_id, [])]:  # cancelled (shutdown): nobody waits forever
                if not f.done():
                    f.cancel()

    async def close(self, grace_s: float = 10.0) -> None:
        """Let the writes under way finish (a write cut halfway is retried, but needlessly), then stop."""
        tasks = list(self._writers.values())
        if tasks:
            await asyncio.wait(tasks, timeout=grace_s)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
