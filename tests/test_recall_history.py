"""The inspector's recall charts read a ring of recent recalls per agent kept by the proxy: it stays
bounded however many recalls and agents there are, and what it draws is escaped text."""

from __future__ import annotations

import time

from memplane_core.telemetry import MemoryOp
from proxy.operator import charts
from proxy.operator.recall_history import RecallHistory


def recall(agent: str, status: str = "succeeded", latency: float = 10.0) -> MemoryOp:
    return MemoryOp(agent_id=agent, service="svc", op="recall", status=status, latency_ms=latency)


def test_the_history_keeps_the_newest_recalls_of_the_most_recently_heard_agents():
    history = RecallHistory(per_agent=5, max_agents=3)
    for i in range(20):
        history.observe(recall("busy", latency=float(i)))
    for agent in ("a", "b", "c"):  # "busy" is now the least recently heard from: dropped for "c"
        history.observe(recall(agent, "timed_out"))
    history.observe(MemoryOp(agent_id="a", service="svc", op="retain", status="succeeded"))  # not a recall

    assert sum(b.total for b in history.buckets("busy")) == 0
    assert [sum(b.total for b in history.buckets(a)) for a in ("a", "b", "c")] == [1, 1, 1]
    every = history.buckets(None)
    assert sum(b.counts["timed_out"] for b in every) == 3 and sum(b.total for b in every) == 3

    history = RecallHistory(per_agent=5, max_agents=3)
    for i in range(20):
        history.observe(recall("busy", latency=float(i)))
    latencies = sorted(x for b in history.buckets("busy") for x in b.latencies)
    assert latencies == [15.0, 16.0, 17.0, 18.0, 19.0]  # the newest five


def test_recalls_older_than_the_window_are_left_out_and_a_replayed_block_counts_as_skipped():
    history = RecallHistory()
    history.observe(recall("a"))
    history.observe(MemoryOp(agent_id="a", service="svc", op="recall", status="reused"))
    later = time.time() + 7 * 3600
    assert sum(b.total for b in history.buckets("a", now=later)) == 0
    now = history.buckets("a")
    assert sum(b.counts["succeeded"] for b in now) == 1 and sum(b.counts["skipped"] for b in now) == 1
    assert sum(len(b.latencies) for b in now) == 1  # a replay made no service call: no latency


def test_chart_labels_are_text_never_markup():
    svg = str(charts.memories_by_kind({"<script>alert(1)</script>": 2, "fact": 1}))
    assert "<script>" not in svg and "&lt;script&gt;" in svg
    spark = str(charts.sparkline(RecallHistory().buckets("a"), 'agent "><img src=x>'))
    assert "<img" not in spark and 'role="img"' in spark


def test_a_recall_the_service_answered_with_less_than_its_usual_ranking_counts_as_degraded():
    history = RecallHistory()
    history.observe(recall("a"))
    history.observe(MemoryOp(agent_id="a", service="svc", op="recall", status="succeeded", latency_ms=150.0,
                             extra={"ranking": "lexical: deadline", "degraded": "lexical"}))
    history.observe(MemoryOp(agent_id="b", service="svc", op="recall", status="succeeded", latency_ms=1.0,
                             extra={"degraded": "shed"}))
    mine = history.buckets("a")
    assert sum(b.counts["succeeded"] for b in mine) == 1 and sum(b.counts["degraded"] for b in mine) == 1
    assert sum(len(b.latencies) for b in mine) == 2  # a degraded recall was timed like any other
    assert sum(b.counts["degraded"] for b in history.buckets("b")) == 1  # per agent
    svg = str(charts.recall_status(mine, 6))
    assert "2 recalls: 1 succeeded, 1 degraded (words only or shed), 0 skipped" in svg
    assert "1 degraded" in str(charts.sparkline(mine, "a"))
