"""The recall step: what the memory service has for this call, after policy — or, for a call that
continues a user turn, the block the turn's first call got. The inject step (inject.py) places it."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from memplane_core.contract import RecallRequest

from ..coding.already_said import drop_already_said
from ..explanation import RecallDetail
from ..inject import drop_repeated_lines
from ..memory_service import MemoryService, RecallOutcome
from ..recall_policy import InjectedMemory, PolicyResult, apply_policy
from ..turn_blocks import TurnBlock, TurnKey, offers_tools, turn_key
from .value import RecallSummary, Turn


@dataclass
class Recalled:
    """What the service answered and what policy let through, for the inject step."""

    request: RecallRequest
    outcome: RecallOutcome
    policy: PolicyResult
    memories: list[InjectedMemory]
    already: int  # lines left out: the request already carries them (a resumed session's own turns)
    repeated: int  # lines left out: repeated within the block
    key: TurnKey  # the user turn's key, to keep the block for its continuations
    messages: Any  # the call's recall messages, where its question is
    tools: bool  # the call offers tools: a continuation can follow
    large: bool  # redacted on worker threads


async def recall(turn: Turn) -> Recalled | TurnBlock | None:
    """The memories for this call; the block to inject again; or None (skipped, failed: said why)."""
    assert turn.coding is not None and turn.state.session is not None
    if not turn.coding.recalls:  # a side call or a compaction request: no block, and not a loop's step
        return skipped(turn, f"a {turn.coding.kind.value} call gets no memories (coding/side_calls.py)")
    messages = turn.fmt.recall_messages(turn.body)
    tools = offers_tools(turn.body)  # without tools no call can continue this one: nothing to key or keep
    key = turn_key(turn.agent_id, turn.fmt.name, turn.body, messages) if tools else TurnKey(None, False)
    # a loop is named by the user turn it began with; a continuation known only by its chain or its
    # conversation (no user message in the call) is a step of the loop its turn's first call named
    # (a conversation's key is every turn's, never a loop's)
    turn.loop_key = key.key if key.question_index is not None else None
    if key.continues:
        remembered = await turn.state.turn_blocks.fetch(key.key)
        if remembered is not None:
            turn.loop_key = turn.loop_key or remembered.loop
            return remembered
    query = turn.fmt.query(turn.coding.body)  # the person's words: the client's scaffolding set aside
    if not query.strip():  # nothing the user said to search with (tool results, images)
        return skipped(turn, "no user text to recall with")
    large = turn.state.redactor.is_large(turn.body)
    request, outcome = await _ask(turn, query, large)
    if outcome.status != "succeeded":
        return failed(turn, request, outcome)
    policy = apply_policy(outcome.memories, turn.state.redactor, max_blocks=turn.ctx.memory.max_blocks,
                          budget_tokens=turn.ctx.memory.budget_tokens)
    memories, already = drop_already_said(policy.memories, turn.coding.carried)  # a resumed session's own turns
    memories, repeated = drop_repeated_lines(memories)
    return Recalled(request, outcome, policy, memories, already, repeated, key, messages, tools, large)


async def _ask(turn: Turn, query: str, large: bool) -> tuple[RecallRequest, RecallOutcome]:
    """The recall call itself, under the agent's deadline (CONTRACT §5)."""
    assert turn.coding is not None and turn.state.session is not None and turn.ctx.memory is not None
    async with request_work(turn, large):
        request = await _recall_request(turn, turn.fmt.recall_messages(turn.coding.body), query)
    service = MemoryService.of(turn.state.session, turn.ctx.memory, turn.agent_id, turn.ctx.metadata.pod,
                               deadlines=turn.state.recall_deadlines)
    return request, await service.recall(request)


def request_work(turn: Turn, large: bool) -> Any:
    """A large request is redacted on worker threads, and never on all of them for one agent; a small
    one is redacted right here and needs no share (taking one cost ~2% of a turn's CPU)."""
    return turn.state.request_work.held(turn.agent_id) if large else contextlib.nullcontext()


async def _recall_request(turn: Turn, messages: Any, query: str) -> RecallRequest:
    """The recall body (CONTRACT §5). Secrets never leave for a memory service: it is scrubbed like a
    retain. Built, not validated: its parts were checked when the agent's context was loaded."""
    manifest, ctx, body, redact = turn.ctx.memory, turn.ctx, turn.body, turn.state.redactor
    assert manifest is not None and turn.coding is not None
    system = turn.fmt.recall_system(body)
    return RecallRequest.model_construct(
        agent_id=ctx.agent_id, pod=ctx.metadata.pod,
        messages=(await redact.json_async(messages))[0], query=(await redact.text_async(query))[0],
        metadata=ctx.memory_metadata(turn.fmt.name, body.get("model"), turn.session_id, turn.coding.project),
        # memplane's extension: how much the proxy will inject, so a service can pack to fit
        budget_tokens=manifest.budget_tokens, max_blocks=manifest.max_blocks,
        system=None if system is None else (await redact.json_async(system))[0])


def skipped(turn: Turn, why: str) -> None:
    """No recall for this call: said in a memory_op event and the explanation."""
    service = turn.ctx.memory.service
    turn.state.telemetry.memory_op(agent_id=turn.agent_id, service=service, op="recall", status="skipped",
                                   error=why)
    turn.recall = RecallSummary("skipped", detail=RecallDetail(service=service, skipped=why))


def failed(turn: Turn, request: RecallRequest, outcome: RecallOutcome) -> None:
    """The service failed or ran out of time: the call goes on without memories."""
    service = turn.ctx.memory.service
    turn.state.telemetry.memory_op(agent_id=turn.agent_id, service=service, op="recall",
                                   status=outcome.status, status_code=outcome.status_code,
                                   latency_ms=outcome.latency_ms, error=outcome.error)
    turn.recall = RecallSummary(outcome.status, latency_ms=outcome.latency_ms,
                                detail=RecallDetail(service=service, query=request.query,
                                                    error=outcome.error, deadline_ms=outcome.deadline_ms))
