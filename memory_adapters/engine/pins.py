"""Pinned memories in recall: an operator pinned them, so they lead every recall that can see
them, as long as they fit the budget and the block count; the engine's ranking fills the rest."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from memplane_core.tokens import estimate_tokens

from .index import AgentIndex, RecallQuery
from .packing import Packed, memory_line, said_time
from .record import StoredMemory, iso, origin_attr, untrusted, writer_attr

Recall = Callable[..., list[Packed]]


def pinned_first(recall: Recall) -> Recall:
    """`recall(own, shared, q, visible=)` with the pinned memories (own, then shared) first."""
    def with_pins(own: AgentIndex, shared: AgentIndex | None, q: RecallQuery, visible: Any = None) -> list[Packed]:
        pins = [own.memories[i] for i in own.pinned if i in own.memories]
        if shared is not None:
            pins += [shared.memories[i] for i in shared.pinned if i in shared.memories]
        # a pin a model's or a tool's memory still carries (set before the store refused it) does not lead
        pins = [m for m in pins if (visible is None or visible(m)) and not untrusted(m)]
        if not pins:
            return recall(own, shared, q, visible=visible)
        pins.sort(key=lambda m: (-m.importance, -m.updated_at, m.id))
        first: list[Packed] = []
        budget = q.budget_tokens
        for m in pins:
            text = memory_line(m)
            cost = estimate_tokens(text)
            if len(first) >= q.max_blocks or cost > budget:
                continue  # a pin that does not fit is skipped, never cut mid-sentence
            budget -= cost
            first.append(Packed(text=text, score=1.0, kind=m.type, ts=iso(said_time(m)), id=m.id, memory_ids=[m.id],
                                origin=origin_attr([m]), writer=writer_attr([m])))
        shown = {p.id for p in first}

        def rest_visible(m: StoredMemory) -> bool:
            return m.id not in shown and (visible is None or visible(m))

        if len(first) >= q.max_blocks or budget <= 0:
            return first
        return first + recall(own, shared, replace(q, budget_tokens=budget, max_blocks=q.max_blocks - len(first)),
                              visible=rest_visible)
    return with_pins
