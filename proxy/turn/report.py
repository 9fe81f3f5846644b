"""What a turn tells the operator: the recall's memory_op event (CONTRACT §11) and the turn's
explanation (`/memplane/turns/{id}`, proxy/explanation.py)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from memplane_core.clock import now_rfc3339

from ..coding.reading import CodingTurn
from ..explanation import RecallDetail, TurnExplanation
from ..recall_policy import closed_origin
from ..state import ProxyState
from .value import Turn

if TYPE_CHECKING:
    from .recall import Recalled


def report_recall(turn: Turn, found: Recalled, block: str | None, tokens: int, removed: int) -> None:
    """The recall's memory_op event (CONTRACT §11)."""
    outcome, policy = found.outcome, found.policy
    extra: dict[str, Any] = {"memory_tokens": tokens, **outcome.event_fields()}
    if policy.redactions:
        extra["redactions"] = dict(policy.redactions)
    if policy.reasons:
        extra["policy_reasons"] = dict(policy.reasons)
    if found.repeated:
        extra["repeated_lines"] = found.repeated
    assert turn.ctx.memory is not None
    turn.state.telemetry.memory_op(agent_id=turn.agent_id, service=turn.ctx.memory.service, op="recall",
                                   status="succeeded", status_code=outcome.status_code,
                                   latency_ms=outcome.latency_ms, blocks=len(found.memories),
                                   bytes_=len(block.encode()) if block else 0, removed=removed, **extra)


def explain_recall(state: ProxyState, service: str, query: str, found: Recalled, block: str | None,
                   placement: str | None, note: str | None, tokens: int) -> RecallDetail:
    """The recall part of the turn's explanation. It shows what the block showed: policy-redacted
    text, never the recalled raw text."""
    outcome, policy = found.outcome, found.policy
    kept = iter(policy.memories)
    detail = RecallDetail(
        service=service, query=query, block=block, placement=placement, tokens=tokens, ranking=outcome.ranking,
        deadline_ms=outcome.deadline_ms, redactions=dict(policy.redactions),
        memories=[{"kind": m.kind, "source": m.source, "origin": closed_origin(m.origin), "writer": m.writer,
                   "score": m.score, "id": m.id, "decision": decision,
                   "text": (next(kept).text if decision == "injected"
                            else state.redactor.text(m.text[:2000])[0])[:500]}
                  for m, decision in zip(outcome.memories, policy.decisions)])
    if note:
        detail.placement_note = note
    if outcome.degraded:
        detail.degraded = outcome.degraded
    if found.repeated:
        detail.repeated_lines_dropped = found.repeated
    return detail


def coding_detail(detail: RecallDetail, coding: CodingTurn) -> RecallDetail:
    """The coding read's part of the explanation: what was set aside, the call's kind and its rule,
    the project and where it came from (coding/reading.py)."""
    return coding.explain(detail)


def explain(turn: Turn) -> None:
    """The explain step: the turn's explanation, recorded before the provider is called."""
    recall = turn.recall
    turn.state.explanations.record(turn.turn_id, TurnExplanation(
        turn.turn_id, turn.agent_id, now_rfc3339(), time.time(), turn.fmt.name, turn.request.path, recall.status,
        recall.blocks, recall.removed, recall.latency_ms, recall.detail).as_dict())
