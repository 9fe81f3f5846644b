"""The turn's coding read, the scope step of the turn (`proxy/turn/steps.py`): what kind of call it is, the project
it works in, the person's words with the scaffolding set aside, and the request's own text (what
recall must not hand back)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from memplane_core.turn_text import text_of

from .already_said import request_shingles
from .project import project_of
from .scaffolding import RECUR_MIN_CHARS, SetAside, digest, session_of_request, sift_body, user_texts
from .side_calls import SideCall, classify

LARGE_CHARS = 200_000  # a request this large is read in a worker thread


@dataclass
class CodingTurn:
    kind: SideCall = SideCall.TURN
    project: str | None = None
    body: dict[str, Any] = field(default_factory=dict)  # the request with the scaffolding set aside
    set_aside: SetAside = field(default_factory=SetAside)
    carried: set[tuple[str, ...]] = field(default_factory=set)  # word shingles of the person's words sent

    @property
    def recalls(self) -> bool:
        """Side calls and compaction requests get no block (side_calls.py)."""
        return self.kind in (SideCall.TURN, SideCall.SUBAGENT)

    def ledger_marks(self) -> dict[str, Any]:
        """What the turn's ledger line carries for retain (live or backfilled) to do the same."""
        marks: dict[str, Any] = {}
        if self.set_aside.recurring:
            marks["recurring"] = sorted(set(self.set_aside.recurring))
        if self.set_aside.parts:
            marks["set_aside"] = self.set_aside.parts
        if self.kind is not SideCall.TURN:
            marks["side_call"] = self.kind.value
        return marks


def _conversation_texts(body: dict[str, Any]) -> list[str]:
    """The person's words the request carries (scaffolding already set aside)."""
    items = body.get("messages") if isinstance(body.get("messages"), list) else body.get("input")
    if isinstance(items, str):
        return [items]
    return [text_of(m.get("content"))
            for m in items or () if isinstance(m, dict) and m.get("role") == "user"]


def _read(headers: Any, body: dict[str, Any], recurring: set[str], project_scope: bool) -> CodingTurn:
    """The pure part: no shared state is touched, so a large request can be read in a thread."""
    kind = classify(headers, body)
    project = project_of(headers, body, project_scope)
    sifted, aside = sift_body(body, (lambda t: digest(t) in recurring) if recurring else None)
    return CodingTurn(kind, project, sifted, aside, request_shingles(_conversation_texts(sifted)))


async def read_turn(state: Any, ctx: Any, headers: Any, body: dict[str, Any],
                    session_id: str | None) -> CodingTurn:
    """The coding read of a call to an agent with memory (a large request off the event loop).
    Which parts recur is decided here, on the loop, where the recurrence counts live."""
    items = body.get("messages") if isinstance(body.get("messages"), list) else body.get("input")
    texts = user_texts(items if isinstance(items, list) else [])
    recurrence = state.scaffolding
    recurrence.observe(ctx.agent_id, session_of_request(headers, body, session_id), texts)
    is_recurring = recurrence.of(ctx.agent_id)
    recurring = {digest(t) for t in texts if len(t.strip()) >= RECUR_MIN_CHARS and is_recurring(t)}
    scope = getattr(ctx.metadata, "project_scope", True)
    large = sum(len(t) for t in texts) > LARGE_CHARS
    turn = (await asyncio.to_thread(_read, headers, body, recurring, scope) if large
            else _read(headers, body, recurring, scope))
    metrics = state.metrics
    for rule, n in turn.set_aside.by_rule.items():
        metrics.scaffolding_parts.labels(rule).inc(n)
    if turn.set_aside.chars:
        metrics.scaffolding_chars.inc(turn.set_aside.chars)
    metrics.child(metrics.calls_by_kind, turn.kind.value).inc()
    return turn
