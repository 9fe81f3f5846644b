"""Load shedding for retains: a memory service that already has as many retain calls in hand as
it takes answers the next one at once with 503 and `Retry-After`, instead of queueing it until
the proxy's write timeout (2 s) fires and the same turns are sent again on top of the queue.

Slots are shared fairly between agents: one agent may hold at most its share,
`limit // max(2, busy agents)` (at least 1), where busy agents are those with calls in hand or
refused in the last few seconds. So one agent's 40 concurrent batches never take every slot
(half at most while it is alone), and an agent that was turned away gets in on its retry.

Delivery honours `Retry-After` (proxy/retain/delivery.py), and retain is idempotent by entry id, so a
shed call costs one round trip and loses nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

DEFAULT_MAX_RETAINS_IN_FLIGHT = 32  # retain calls (single or batch) a service works on at once
RETRY_AFTER_S = 1
WAITING_S = 3 * RETRY_AFTER_S  # a refused agent counts as busy this long: its retry finds room


class RetainAdmission:
    """Counts retain calls in hand, per agent; `slot(agent)` admits one within the global limit
    and the agent's fair share."""

    def __init__(self, limit: int, clock: Callable[[], float] = time.monotonic) -> None:
        if limit < 1:
            raise ValueError("max retains in flight must be at least 1")
        self.limit = limit
        self.in_flight = 0
        self._clock = clock
        self._held: dict[str, int] = {}  # agent → calls in hand
        self._waiting: dict[str, float] = {}  # agent → when it was last turned away

    def share(self, agent_id: str) -> int:
        """How many calls `agent_id` may hold now."""
        now = self._clock()
        if self._waiting:
            self._waiting = {a: t for a, t in self._waiting.items() if now - t < WAITING_S}
        busy = len(self._held.keys() | self._waiting.keys() | {agent_id})
        return max(1, self.limit // max(2, busy))

    @contextmanager
    def slot(self, agent_id: str) -> Iterator[bool]:
        """Yields whether this call was admitted; an admitted call holds its place until it ends."""
        held = self._held.get(agent_id, 0)
        if self.in_flight >= self.limit or held >= self.share(agent_id):
            self._waiting[agent_id] = self._clock()
            yield False
            return
        self._waiting.pop(agent_id, None)
        self.in_flight += 1
        self._held[agent_id] = held + 1
        try:
            yield True
        finally:
            self.in_flight -= 1
            left = self._held[agent_id] - 1
            if left:
                self._held[agent_id] = left
            else:
                del self._held[agent_id]
