"""A keyed fact that changed: the turns that stated its earlier value are shown as past.

Both engines keep one memory per profile topic (`profile:home`, profile.PROFILE_RULES): the
newest statement wins (profile.newer, by when it was said, whatever order the turns came in), and
each turn's episode notes the values it stated. The turn that said the old value ("I now live in
Porto") is still an episode and may rank for a question about the topic; unmarked, the model
cannot tell which is current. Such a turn is marked as past in the block (`RecallQuery.past`,
packing.PAST_MARK), as the curator marks the turns of a replaced fact, and the fact holding the
current value leads the block beside it, whether or not the question's words find it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from memplane_core.tokens import estimate_tokens

from .index import AgentIndex, RecallQuery
from .packing import Packed, memory_line, said_time
from .pins import Recall
from .profile import PROFILE
from .record import StoredMemory, bounded, iso, origin_attr, writer_attr


@dataclass
class _Seen:
    """What `earlier_turns` has read of an index: how many lexical rows it had then (every put
    takes a new row, lexical.LexicalIndex.ids), the memory holding each profile topic, and the
    episodes that stated a value."""

    rows: int = 0
    facts: dict[str, str] = field(default_factory=dict)  # topic → the fact's id
    stating: dict[str, tuple[dict[str, str], float]] = field(default_factory=dict)  # episode id → (values, said)

    def read(self, m: StoredMemory) -> None:
        self.stating.pop(m.id, None)  # put again: what it states now
        if m.type == "fact" and m.key.startswith(PROFILE) and m.said_at is not None:
            self.facts[m.key.removeprefix(PROFILE)] = m.id
        elif m.type == "episode" and isinstance(m.metadata, dict) and isinstance(m.metadata.get("profile"), dict):
            self.stating[m.id] = (m.metadata["profile"], m.said_at or m.created_at)


def changed_turns(idx: AgentIndex) -> dict[str, tuple[str, ...]]:
    """The episodes that stated a profile fact's earlier value, each with the topics it is out of
    date on: a turn whose stated value (`metadata["profile"]`, profile.py) differs from the fact's
    current one and was said before it. Read incrementally: only the memories put since the last
    recall, so a recall right after a retain does not walk the agent's every memory; a dropped one
    is left out when read."""
    mems, rows = idx.memories, idx.lexical.ids
    seen = getattr(idx, "_profile_seen", None)
    if seen is None or len(rows) < seen.rows:
        seen = _Seen()
    for memory_id in dict.fromkeys(rows[seen.rows:]):
        m = mems.get(memory_id) if memory_id is not None else None
        if m is not None:
            seen.read(m)
    seen.rows = len(rows)
    idx._profile_seen = seen
    current = {topic: (m.value, m.said_at) for topic, i in seen.facts.items()
               if (m := mems.get(i)) is not None and m.said_at is not None}
    if not current:
        return {}
    out: dict[str, tuple[str, ...]] = {}
    for i, (stated, said) in seen.stating.items():
        if i in mems and (topics := tuple(topic for topic, value in stated.items() if topic in current
                                          and value != current[topic][0] and said < current[topic][1])):
            out[i] = topics
    return out


def earlier_turns(idx: AgentIndex) -> frozenset[str]:
    """Ids of the episodes that stated a profile fact's earlier value (changed_turns)."""
    return frozenset(changed_turns(idx))


def with_current_facts(idx: AgentIndex, packed: list[Packed], changed: dict[str, tuple[str, ...]],
                       q: RecallQuery, visible: Any = None) -> list[Packed]:
    """`packed`, led by the current fact of each topic a shown turn is marked past on (the mark says
    "see Current facts": the value it points at is in the block, whatever the question's words),
    within the recall's budget and block count: the last blocks give way. In place, so that an
    answer keeps its type (and ranking)."""
    shown = {i for p in packed for i in p.memory_ids}
    topics = dict.fromkeys(t for p in packed for i in p.memory_ids for t in changed.get(i, ()))
    seen = getattr(idx, "_profile_seen", None)
    facts = [m for t in topics if seen is not None and (i := seen.facts.get(t)) is not None and i not in shown
             and (m := idx.memories.get(i)) is not None and (visible is None or visible(m))]
    if not facts:
        return packed
    packed[:0] = [Packed(text=memory_line(m), score=0.0, kind=m.type, ts=iso(said_time(m)), id=m.id,
                         memory_ids=[m.id], origin=origin_attr([m]), writer=writer_attr([m]), bounded=bounded(m))
                  for m in facts]
    while len(packed) > len(facts) and (len(packed) > q.max_blocks or
                                        sum(estimate_tokens(p.text) for p in packed) > q.budget_tokens):
        packed.pop()
    return packed


def marking_earlier(recall: Recall) -> Recall:
    """`recall(own, shared, q, visible=)` with the turns of a changed profile fact marked as past,
    and the fact's current value beside them."""
    def marked(own: AgentIndex, shared: AgentIndex | None, q: RecallQuery, visible: Any = None) -> list[Packed]:
        changed = changed_turns(own)
        if not changed:
            return recall(own, shared, q, visible=visible)
        packed = recall(own, shared, replace(q, past=q.past | frozenset(changed)), visible=visible)
        return with_current_facts(own, packed, changed, q, visible)
    return marked
