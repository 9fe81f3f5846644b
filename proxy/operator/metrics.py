"""Prometheus metrics for the proxy (`GET /metrics`), produced by prometheus_client.

One registry per app (tests run several apps in one process). No agent id is ever a label:
agent ids are unbounded; per-agent figures belong in logs and `memplane audit`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from memplane_core.telemetry import MemoryOp

LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0)

__all__ = ["CONTENT_TYPE_LATEST", "ProxyMetrics"]


class ProxyMetrics:
    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}
        self.turns = Counter("memplane_turns", "Model calls answered, by wire format and HTTP status.",
                             ["format", "status"], registry=r)
        self.upstream_latency = Histogram("memplane_upstream_latency_seconds",
                                          "Time from sending a turn upstream to its response headers.",
                                          buckets=LATENCY_BUCKETS, registry=r)
        self.memory_ops = Counter("memplane_memory_ops", "Memory operations, by op and status.", ["op", "status"],
                                  registry=r)
        self.recalls_degraded = Counter("memplane_recalls_degraded",
                                        "Recalls a service answered with less than its usual ranking, by reason: "
                                        "lexical (no dense ranking in time), shed, loading, other; each is also "
                                        "a succeeded recall in memplane_memory_ops.", ["reason"], registry=r)
        self.recall_latency = Histogram("memplane_recall_latency_seconds", "Recall round trips to memory services.",
                                        buckets=LATENCY_BUCKETS, registry=r)
        self.injected_blocks = Counter("memplane_injected_blocks", "Memory blocks injected into prompts.", registry=r)
        self.injected_tokens = Counter("memplane_injected_tokens", "Estimated tokens of injected memories.",
                                       registry=r)
        self.policy_removed = Counter("memplane_policy_removed", "Recalled blocks the policy dropped, by reason.",
                                      ["reason"], registry=r)
        self.redactions = Counter("memplane_redactions", "Secret-shaped values redacted, by kind.", ["kind"],
                                  registry=r)
        self.dead_letters = Counter("memplane_retain_dead_letters", "Entries parked in retain.dead.jsonl.",
                                    registry=r)
        self.backlog = Gauge("memplane_retain_backlog_entries",
                             "Ledgered entries not yet acknowledged by their memory service (all agents).",
                             registry=r)

        self.scaffolding_parts = Counter("memplane_scaffolding_set_aside_parts",
                                         "Client scaffolding parts set aside from recall queries and retains, by rule.",
                                         ["rule"], registry=r)
        self.scaffolding_chars = Counter("memplane_scaffolding_set_aside_chars",
                                         "Characters of client scaffolding set aside.", registry=r)
        self.calls_by_kind = Counter("memplane_calls_by_kind",
                                     "Calls of agents with memory by kind: turn, side, subagent, compaction.",
                                     ["kind"], registry=r)
        self.calls_by_rule = Counter("memplane_calls_by_rule",
                                     "Calls of agents with memory by kind and the rule that decided it "
                                     "(coding/side_calls.py).", ["kind", "rule"], registry=r)

    def child(self, metric: Any, *values: str) -> Any:
        """`metric.labels(*values)`, remembered: prometheus_client looks a child up under a lock
        each time, and every turn counts itself three or four times. The label values are closed
        sets (formats, statuses, ops, kinds), so this stays small."""
        key = (id(metric), values)
        hit = self._children.get(key)
        if hit is None:
            hit = self._children[key] = metric.labels(*values)
        return hit

    def watch_backlog(self, read: Callable[[], float]) -> None:
        self.backlog.set_function(read)

    def observe_memory_op(self, event: MemoryOp) -> None:
        """Fed with every memory_op event (Telemetry calls it)."""
        self.child(self.memory_ops, event.op, event.status).inc()
        if event.dead_letter:
            self.dead_letters.inc()
        for kind, n in event.redactions.items():
            self.redactions.labels(str(kind)).inc(n)
        if event.op != "recall":
            return
        if event.latency_ms is not None:
            self.recall_latency.observe(event.latency_ms / 1000)
        if event.degraded:
            self.child(self.recalls_degraded, event.degraded).inc()
        self.injected_blocks.inc(event.blocks or 0)
        self.injected_tokens.inc(event.tokens)
        for reason, n in event.policy_reasons.items():
            self.policy_removed.labels(str(reason)).inc(n)

    def render(self) -> bytes:
        return generate_latest(self.registry)
