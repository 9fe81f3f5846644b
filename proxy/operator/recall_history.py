"""Recent recall outcomes per agent, for the inspector's "recall over the last hours" charts.

A Telemetry observer (like the Prometheus metrics) appends each recall's time, latency and status
to a ring per agent: bounded (`PER_AGENT` outcomes, `MAX_AGENTS` agents, the least recently
heard-from dropped first), a deque append per recall, nothing on disk. The histograms of
`/metrics` have no agent label (agent ids are unbounded there), so they cannot answer "per agent".
A restarted proxy starts with empty charts; the ledger and the logs keep the history.
"""

from __future__ import annotations

import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import NamedTuple

from memplane_core.telemetry import MemoryOp

PER_AGENT = 4096  # ~ a recall a minute for three days, or a busy agent's last hours
MAX_AGENTS = 2048
# CONTRACT §11, and `degraded`: succeeded with less than the service's usual ranking (the event's
# `degraded` field: words only at the deadline, shed); `reused` counts as skipped
STATUSES = ("succeeded", "degraded", "skipped", "timed_out", "failed")
TIMED = frozenset({"succeeded", "degraded", "failed", "timed_out"})  # a service call was made and timed


class Outcome(NamedTuple):
    at: float  # time.time()
    latency_ms: float | None
    status: str


@dataclass
class Bucket:
    """The recalls of one time slice: counts by status and their latencies."""

    start: float
    end: float
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(STATUSES, 0))
    latencies: list[float] = field(default_factory=list)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    def percentile(self, q: float) -> float | None:
        if not self.latencies:
            return None
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


class RecallHistory:
    def __init__(self, per_agent: int = PER_AGENT, max_agents: int = MAX_AGENTS) -> None:
        self.per_agent, self.max_agents = per_agent, max_agents
        self._agents: OrderedDict[str, deque[Outcome]] = OrderedDict()

    def observe(self, event: MemoryOp) -> None:
        """Fed with every memory_op event; keeps the recalls (a replayed block is not a service call)."""
        if event.op != "recall":
            return
        ring = self._agents.get(event.agent_id)
        if ring is None:
            ring = self._agents[event.agent_id] = deque(maxlen=self.per_agent)
            if len(self._agents) > self.max_agents:
                self._agents.popitem(last=False)
        else:
            self._agents.move_to_end(event.agent_id)
        status = event.status if event.status in STATUSES else "skipped"
        if status == "succeeded" and event.degraded:
            status = "degraded"
        latency = event.latency_ms if status in TIMED else None
        ring.append(Outcome(time.time(), latency, status))

    def buckets(self, agent_id: str | None, *, hours: float = 6, slices: int = 24,
                now: float | None = None) -> list[Bucket]:
        """The last `hours` in `slices` equal buckets, oldest first (all agents when `agent_id` is None)."""
        now = time.time() if now is None else now
        start = now - hours * 3600
        width = hours * 3600 / slices
        out = [Bucket(start + i * width, start + (i + 1) * width) for i in range(slices)]
        rings = [self._agents.get(agent_id, ())] if agent_id is not None else list(self._agents.values())
        for ring in rings:
            for o in reversed(ring):  # newest first: stop at the window's start
                if o.at < start:
                    break
                b = out[min(slices - 1, int((o.at - start) // width))]
                b.counts[o.status] += 1
                if o.latency_ms is not None:
                    b.latencies.append(o.latency_ms)
        return out
