"""The curator's Prometheus metrics: totals only, with small fixed label sets.

Agent ids are never labels (unbounded series); per-agent cost is `GET /curator/usage`. The
collectors are unregistered here and registered into the memory service's own registry, so
they appear in its `/metrics`.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import Counter, Gauge


class CuratorMetrics:
    def __init__(self, paused: Callable[[], int], pending: Callable[[], int]) -> None:
        self.calls = Counter("memplane_curator_calls", "Curator LLM calls by task (extract, consolidate) and "
                             "outcome (ok, invalid, refused, unavailable).", ["task", "outcome"], registry=None)
        self.tokens = Counter("memplane_curator_tokens", "Tokens the curator spent, by direction (prompt, "
                              "completion).", ["direction"], registry=None)
        self.written = Counter("memplane_curator_memories", "Curated memories by what happened to them (directive, "
                               "fact, summary written; merged, superseded, pruned).", ["change"], registry=None)
        self.paused = Gauge("memplane_curator_paused_agents", "Agents whose daily curator budget is spent today.",
                            registry=None)
        self.paused.set_function(lambda: float(paused()))
        self.pending = Gauge("memplane_curator_pending_windows", "Agent sessions with turns not yet curated.",
                             registry=None)
        self.pending.set_function(lambda: float(pending()))

    def collectors(self) -> list:
        return [self.calls, self.tokens, self.written, self.paused, self.pending]
