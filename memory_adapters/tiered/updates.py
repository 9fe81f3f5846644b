"""A keyed fact that changed: the turns that stated its earlier value are shown as past.

The tiered engine keeps one memory per profile topic (`profile:home`, extract.PROFILE_RULES): the
newest statement wins (service.store, by when it was said, whatever order the turns came in), and
each turn's episode notes the values it stated. The turn that said the old value ("I now live in Porto") is still an episode and
may rank for a question about the topic, beside the fact that says the current value; unmarked,
the model cannot tell which is current. Such a turn is marked as past in the block
(`RecallQuery.past`, packing.PAST_MARK), as the curator marks the turns of a replaced fact.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ..engine.index import AgentIndex, RecallQuery
from ..engine.packing import Packed
from ..engine.pins import Recall
from ..engine.record import StoredMemory

PROFILE = "profile:"


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


def earlier_turns(idx: AgentIndex) -> frozenset[str]:
    """Ids of the episodes that stated a profile fact's earlier value: a turn whose stated value
    (`metadata["profile"]`, extract.py) differs from the fact's current one and was said before
    it. Read incrementally: only the memories put since the last recall, so a recall right after
    a retain does not walk the agent's every memory; a dropped one is left out when read."""
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
        return frozenset()
    return frozenset(i for i, (stated, said) in seen.stating.items() if i in mems and any(
        topic in current and value != current[topic][0] and said < current[topic][1]
        for topic, value in stated.items()))


def marking_earlier(recall: Recall) -> Recall:
    """`recall(own, shared, q, visible=)` with the turns of a changed profile fact marked as past."""
    def marked(own: AgentIndex, shared: AgentIndex | None, q: RecallQuery, visible: Any = None) -> list[Packed]:
        past = earlier_turns(own)
        return recall(own, shared, replace(q, past=q.past | past) if past else q, visible=visible)
    return marked
