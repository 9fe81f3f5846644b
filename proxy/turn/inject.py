"""The inject step: the recalled memories as one `<memories>` block in the request, reported
(memory_op, explanation) and kept for the calls that continue this user turn (turn_blocks.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

from memplane_core.tokens import estimate_tokens

from ..explanation import RecallDetail
from ..formats import WireFormat, placement_for
from ..inject import render_block
from ..recall_policy import InjectedMemory
from ..turn_blocks import TurnBlock, conversation_key, conversation_of, question_of
from .recall import Recalled, request_work
from .report import explain_recall, report_recall
from .value import RecallSummary, Turn


async def inject(turn: Turn, found: Recalled | TurnBlock | None) -> None:
    """Place what the recall step found; nothing found (skipped, failed) leaves the request as it is."""
    if isinstance(found, TurnBlock):
        inject_again(turn, found)
    elif found is not None:
        await inject_recalled(turn, found)


def place(fmt: WireFormat, manifest: Any, body: dict[str, Any], block: str,
          memories: tuple[InjectedMemory, ...] | list[InjectedMemory]) -> tuple[dict[str, Any], str, str | None]:
    placement, note = placement_for(fmt, manifest.placement, body)
    return fmt.inject(body, block, list(memories), manifest.service, placement), placement, note


def inject_again(turn: Turn, block: TurnBlock) -> None:
    """A call that continues a user turn gets the byte-identical block the turn's first call got."""
    manifest = turn.ctx.memory
    assert manifest is not None
    placement = note = None
    if block.block:
        turn.effective, placement, note = place(turn.fmt, manifest, turn.body, block.block, block.memories)
    # CONTRACT §11 names four statuses: no service call was made, so `skipped`, with why
    turn.state.telemetry.memory_op(agent_id=turn.agent_id, service=manifest.service, op="recall", status="skipped",
                                   blocks=len(block.memories), bytes_=len(block.block.encode()), removed=0,
                                   reused=True, error="continues a user turn: its first call's block again")
    detail = dataclasses.replace(
        RecallDetail.from_dict(block.detail), placement=placement, placement_note=note,
        reused="the block of this user turn's first call (a continuation: tool results or a chain step)")
    turn.recall, turn.block = RecallSummary("reused", len(block.memories), 0, 0.0, detail), block


async def inject_recalled(turn: Turn, found: Recalled) -> None:
    """This user turn's first call: its block rendered, placed, reported, explained and kept."""
    manifest, memories = turn.ctx.memory, found.memories
    assert manifest is not None
    block = placement = note = None
    if memories:
        block = render_block(manifest.service, memories)
        turn.effective, placement, note = place(turn.fmt, manifest, turn.body, block, memories)
    tokens = sum(estimate_tokens(m.text) for m in memories)
    removed = found.policy.memory_removed + len(found.policy.memories) - len(memories)
    report_recall(turn, found, block, tokens, removed)
    detail = explain_recall(turn.state, manifest.service, found.request.query or "", found, block, placement, note,
                            tokens)
    if found.already:
        detail.already_in_request = found.already
    async with request_work(turn, found.large):
        question = (await turn.state.redactor.text_async(question_of(found.messages, found.key)))[0]  # any size
    turn.block = TurnBlock(block or "", tuple(memories), placement or "", note, question,
                           detail.as_dict() if found.tools else {},  # the detail is for a continuation's replay
                           loop=turn.loop_key)
    keep(turn, found)
    turn.recall = RecallSummary(found.outcome.said, len(memories), removed, found.outcome.latency_ms, detail)


def keep(turn: Turn, found: Recalled) -> None:
    """A call that offers tools can be continued: its block is kept under the turn's key."""
    if not found.tools:
        return
    turn.state.turn_blocks.put(found.key.key, turn.block)
    conversation = conversation_of(turn.effective)
    if conversation:  # its next tool outputs come without the question (the provider keeps it)
        turn.state.turn_blocks.put(conversation_key(turn.agent_id, conversation), turn.block)
