"""Recall with curated memories: the agent's directives and current facts lead, episodes follow.

Directives bind every answer, so they are eligible for every recall; facts come when they share
words with the query. Both go into one block ahead of the engine's usual blocks, within a share
of the token budget; superseded facts never appear, in that block or anywhere else.

A fact that replaced another ("I moved from Lisbon to Porto") comes with the turn that changed it,
which may share no words with the question; the turns the replaced facts were drawn from ("I live
in Lisbon") may still rank among the episodes, and are marked as past there (issue 40).
"""

from __future__ import annotations

import math

import orjson
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any

from memplane_core.tokens import estimate_tokens

from ..episodes import episode_id
from ..index import AgentIndex, RecallQuery, recall_with_shared
from ..lexical import terms
from ..packing import BLOCK_OVERHEAD_BYTES, MAX_ANSWER_BYTES, Packed
from ..record import StoredMemory, iso, origin_attr, origins_of, untrusted
from .consolidation import superseded

LEAD_TYPES = ("directive", "fact")
LEAD_SHARE = 0.3  # of the budget, at most, for the leading block: episodes keep the rest
LEAD_MAX_BYTES = 4000  # and of the answer's bytes (the proxy refuses recall answers over 16 KiB)
CHANGE_TURN_CHARS = 300  # the turn that changed a fact, as shown under it


def curated(m: StoredMemory) -> bool:
    return m.type == "directive" or (m.type == "fact" and isinstance(m.metadata, dict) and "curator" in m.metadata)


def may_lead(m: StoredMemory) -> bool:
    """Only what the user or the operator said leads: a directive drawn from anything else, and
    any memory a model or a tool wrote, is never shown as the user's standing instruction."""
    if untrusted(m):
        return False
    return m.type != "directive" or origins_of(m) <= {"user", "operator", "curator"}


def _fact_terms(m: StoredMemory) -> frozenset[str]:
    topic = m.metadata.get("topic") if isinstance(m.metadata, dict) else None
    return frozenset(terms(f"{topic.replace('_', ' ') if isinstance(topic, str) else ''} {m.value}"))


def _lead(idx: AgentIndex) -> list[tuple[StoredMemory, frozenset[str]]]:
    """Directive and fact memories with their words, cached on the index until its memories
    change (a put moves the memory to the end of the dict; a drop shortens it)."""
    mems = idx.memories
    mark = (len(mems), next(reversed(mems)) if mems else None)
    cached = getattr(idx, "_curator_lead", None)
    if cached is not None and cached[0] == mark:
        return cached[1]
    lead = [(m, _fact_terms(m) if m.type == "fact" else frozenset()) for m in mems.values() if m.type in LEAD_TYPES]
    idx._curator_lead = (mark, lead)
    return lead


def _day(m: StoredMemory) -> str:
    return datetime.fromtimestamp(m.said_at or m.created_at, timezone.utc).strftime("%Y-%m-%d")


def source_episodes(idx: AgentIndex, m: StoredMemory) -> list[StoredMemory]:
    """The turns a curated memory was drawn from that the index still holds (their first pieces)."""
    got = (idx.memories.get(episode_id(m.agent_id, e)) for e in m.source_entry_ids)
    return [ep for ep in got if ep is not None and ep.type == "episode"]


def _updates(idx: AgentIndex) -> tuple[set[str], set[str]]:
    """Ids of the facts that replaced another, and of the episodes only replaced facts were drawn
    from (what the user said before the change), cached with `_lead`."""
    cached = getattr(idx, "_curator_updates", None)
    lead = _lead(idx)
    if cached is not None and cached[0] is lead:
        return cached[1]
    replacing: set[str] = set()
    old_turns: set[str] = set()
    current_turns: set[str] = set()
    for m, _ in lead:
        if m.type != "fact" or not curated(m):
            continue
        if superseded(m):
            replacing.add(str(m.metadata["superseded_by"]))
            old_turns.update(ep.id for ep in source_episodes(idx, m))
        else:
            current_turns.update(ep.id for ep in source_episodes(idx, m))
    found = (replacing, old_turns - current_turns)
    idx._curator_updates = (lead, found)
    return found


def _change_lines(idx: AgentIndex, m: StoredMemory, visible: Any) -> tuple[list[str], list[str]]:
    """Under a fact that replaced another, the turn(s) that said so, newest first; with their ids."""
    turns = sorted((ep for ep in source_episodes(idx, m) if visible is None or visible(ep)),
                   key=lambda ep: -(ep.said_at or ep.created_at))[:2]
    lines = [f"  changed when the user said ({_day(ep)}): {_clip(ep.value)}" for ep in turns]
    return lines, [ep.id for ep in turns]


def _clip(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= CHANGE_TURN_CHARS else text[: CHANGE_TURN_CHARS - 1] + "…"


def lead_block(idx: AgentIndex, q: RecallQuery, visible: Any = None, shown: set[str] | None = None
               ) -> Packed | None:
    """One block: every current directive (most important first), then facts that share words
    with the query (best match first), as many as fit `LEAD_SHARE` of the budget. A fact that
    replaced another comes with the turn that changed it; `shown` gets those turns' ids."""
    shown = set() if shown is None else shown
    room = int(q.budget_tokens * LEAD_SHARE)
    directives: list[StoredMemory] = []
    facts: list[tuple[float, StoredMemory]] = []
    qterms = set(terms(q.text))
    for m, mine in _lead(idx):
        if not curated(m) or not may_lead(m) or superseded(m) or (visible is not None and not visible(m)):
            continue
        if m.type == "directive":
            directives.append(m)
        elif qterms:
            shared = len(qterms & mine)
            if shared:
                facts.append((shared / math.sqrt(len(mine) or 1), m))
    directives.sort(key=lambda m: (-m.importance, -(m.said_at or m.created_at)))
    facts.sort(key=lambda p: (-p[0], -p[1].importance))
    lines: list[str] = []
    used: list[StoredMemory] = []
    spent = 0
    replacing = _updates(idx)[0] if facts else set()
    for heading, group in (("Standing instructions from the user:", directives),
                           ("Current facts:", [m for _, m in facts])):
        first = True
        for m in group:
            line = f"- {m.value}" if m.type == "directive" else f"- {m.value} (as of {_day(m)})"
            turn_ids: list[str] = []
            if m.id in replacing:  # the turn that changed it: the question may share no word with it
                changed, turn_ids = _change_lines(idx, m, visible)
                line = "\n".join([line, *changed])
            cost = estimate_tokens(line) + (estimate_tokens(heading) if first else 0) + 1
            size = len(orjson.dumps("\n".join([*lines, *([heading] if first else []), line])))
            if spent + cost > room or size > LEAD_MAX_BYTES:
                continue
            if first:
                lines.append(heading)
                first = False
            lines.append(line)
            used.append(m)
            shown.update(turn_ids)
            spent += cost
    if not used:
        return None
    newest = max(used, key=lambda m: m.said_at or m.created_at)
    return Packed(text="\n".join(lines), score=1.0, kind="directive" if directives and used[0].type == "directive"
                  else "fact", ts=iso(newest.said_at or newest.created_at), id=used[0].id,
                  memory_ids=[*(m.id for m in used), *shown], origin=origin_attr(used))


def recall_curated_first(own: AgentIndex, shared: AgentIndex | None, q: RecallQuery,
                         visible: Any = None) -> list[Packed]:
    """The lead block, then the engine's recall (shared memories, then the agent's own) in what is
    left of the budget and block count; curated directives and facts, and superseded facts, are
    not ranked again among the episodes, nor the turns shown under a fact; a turn only replaced facts
    were drawn from is marked as past."""
    shown: set[str] = set()

    def rest_visible(m: StoredMemory) -> bool:
        return ((not curated(m) or not may_lead(m)) and not superseded(m) and m.id not in shown
                and (visible is None or visible(m)))

    lead = lead_block(own, q, visible, shown)
    old_turns = _updates(own)[1]
    if old_turns:
        q = replace(q, past=q.past | frozenset(old_turns))
    if lead is None:
        return recall_with_shared(own, shared, q, visible=rest_visible)
    if q.max_blocks <= 1:
        return [lead]
    rest = replace(q, budget_tokens=max(1, q.budget_tokens - estimate_tokens(lead.text)), max_blocks=q.max_blocks - 1)
    blocks = [lead, *recall_with_shared(own, shared, rest, visible=rest_visible)]
    while len(blocks) > 1 and _bytes(blocks) > MAX_ANSWER_BYTES:  # the rest was packed to the whole answer's size
        blocks.pop()  # the lowest-ranked block goes
    return blocks


def _bytes(blocks: list[Packed]) -> int:
    return sum(len(orjson.dumps(b.text)) + BLOCK_OVERHEAD_BYTES for b in blocks)
