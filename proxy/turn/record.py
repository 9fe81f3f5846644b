"""The record step, run by every relay once the answer is known: what the answer continues (its
owner, the user turn's chain, the thread memplane holds), then the ledger line, then retain."""

from __future__ import annotations

import asyncio
from typing import Any

from ..coding.reading import note_answer
from ..ledger.entry import build_entry_json
from .value import Turn


async def record(turn: Turn, answer: dict[str, Any]) -> None:
    """`answer`: what the ledger keeps of it (answer.py); its response id and reply are taken out."""
    rid = answer.pop("response_id", None)
    reply = answer.pop("reply", None)
    own(turn, rid, reply)
    if answer.pop("foreign", False):  # the provider ran a tool and its results are in the conversation now
        turn.state.turn_taint.answered_foreign(turn.ctx, turn.session_id, turn.turn_id)
    if turn.coding is not None:  # what the answer hands its tools: a subagent's task (coding/handed.py)
        note_answer(turn.state, turn.agent_id, turn.coding, answer.get("response"))
    # shielded: a client that goes away mid-write must not cost the ledger its line
    await asyncio.shield(record_turn(turn, answer))


def own(turn: Turn, rid: str | None, reply: Any) -> None:
    """The answer's ids are this agent's (no other agent continues from them), and continue its turn."""
    state, agent_id = turn.state, turn.agent_id
    if turn.fmt.chains:
        state.response_owners.record(agent_id, rid)
    if reply is not None and isinstance(turn.original.get("thread"), dict):
        state.response_owners.record(agent_id, reply[0], "message")
    link(turn, rid)
    if turn.thread is not None and reply is not None:
        state.threads.record(agent_id, turn.thread, *reply)


def link(turn: Turn, response_id: str | None) -> None:
    """The answer's id continues this user turn (a `previous_response_id` chain step)."""
    if turn.chained:
        turn.state.turn_blocks.link(turn.agent_id, response_id, turn.block)


async def record_turn(turn: Turn, answer: dict[str, Any]) -> None:
    """Ledger first (the durable record), then hand the entry to the retain queue."""
    assert turn.upstream is not None
    state, ctx, status = turn.state, turn.ctx, turn.upstream.status
    entry, line = build_entry_json(
        agent_id=ctx.agent_id, path=turn.request.path, requested_model=turn.original.get("model"),
        provider=turn.fmt.provider, effective_model=answer.get("model") or turn.effective.get("model"),
        status_code=status, stream=turn.stream, request_original=turn.original,
        request_effective=turn.effective, response=answer["response"], usage=answer.get("usage"),
        extra=ledger_extra(turn, answer),
    )
    retained = state.retain is not None and ctx.memory is not None and ctx.memory.retain is not None
    if retained:
        state.retain.prepare(ctx.agent_id)
    with state.tracing.ledger_write(entry):
        start, end = await state.ledger.append(ctx.agent_id, entry, line, retain=retained)
    if turn.turn_id:
        state.explanations.update(turn.turn_id, entry_id=entry["id"], ledger_end=end, status_code=status)
    if retained:
        with state.tracing.step("memplane.retain.enqueue"):
            state.retain.submit(ctx.agent_id, start, end, entry)


def ledger_extra(turn: Turn, answer: dict[str, Any]) -> dict[str, Any]:
    """The ledger line's memplane fields. A call that continues a user turn carries the turn's
    question (`turn_question`, redacted): a Responses chain step sends only tool outputs, and memory
    keeps the turn whole at its last step. A call of a tool loop carries the loop's `loop_key`: memory
    keeps one episode per loop, its latest step's (a loop may end on a tool call that never returns)."""
    extra: dict[str, Any] = {"turn_id": turn.turn_id} if turn.turn_id else {}
    if turn.question:
        extra["turn_question"] = turn.question
    if turn.loop_key:
        extra["loop_key"] = turn.loop_key
    if turn.session_id:
        extra["session_id"] = turn.session_id
    if answer.get("citations"):
        extra["citations"] = answer["citations"]
    if turn.coding is not None:  # what retain, live or backfilled, sets aside and scopes (coding/for_memory.py)
        if marks := turn.coding.ledger_marks():
            extra["scaffolding"] = marks
        if turn.coding.project:
            extra["project"] = turn.coding.project
    return extra
