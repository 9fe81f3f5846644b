"""Turn a ledger entry into memories: an episode with the user's own words, plus explicit
statements worth keeping ("remember that…", "I prefer…", "never…") as facts, preferences
and constraints. Long turns are split into sentences, not truncated, so a fact at the end
of a long turn is still findable.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from memplane_core.redact import Redactor
from memplane_core.turn_text import user_text

from ..engine.episodes import episodes_from_entry, sentences
from ..engine.lexical import terms
from ..engine.profile import profile_memories
from ..engine.project_scope import scope_to_project
from ..engine.record import StoredMemory

_RULES: tuple[tuple[str, float, re.Pattern[str]], ...] = (
    ("constraint", 0.8, re.compile(r"^(?:please\s+)?(?:never|always|don't ever|do not ever|you must|must not|"
                                   r"make sure (?:to|you)|avoid)\b", re.I)),
    ("preference", 0.7, re.compile(r"\b(?:i|we)\s+(?:really\s+)?(?:prefer|like|love|enjoy|hate|dislike|"
                                   r"can't stand|don't like|do not like|want you to|favou?rite)\b|"
                                   r"\bmy favou?rite\b", re.I)),
    ("fact", 0.7, re.compile(r"^(?:please\s+)?(?:remember|note|keep in mind|don't forget|fyi)\b(?:\s+that)?", re.I)),
)


def slug(text: str, words: int = 6) -> str:
    t = terms(text)[:words]
    base = "-".join(t) or "note"
    return f"{base}-{hashlib.sha256(text.lower().encode()).hexdigest()[:8]}"


def memories_from_entry(agent_id: str, entry: dict[str, Any], metadata: dict[str, Any],
                        redactor: Redactor) -> list[StoredMemory]:
    """The engine's episodes for the turn (one per piece, speaker and time kept), plus keyed
    profile facts (knowledge updates) and typed statements. A statement that is the whole turn
    retypes its episode instead of storing the same text twice."""
    episodes = episodes_from_entry(agent_id, entry, metadata, redactor)
    if not episodes:
        return []
    return scope_to_project(_with_statements(agent_id, entry, episodes), metadata)


def _with_statements(agent_id: str, entry: dict[str, Any], episodes: list[StoredMemory]) -> list[StoredMemory]:
    """The episodes plus the profile facts and typed statements the person's words state."""
    eid = entry["id"]
    said = episodes[0].said_at
    session_id = episodes[0].session_id
    meta: dict[str, Any] = {"session_id": session_id} if session_id else {}
    meta["origin"] = "user"  # drawn from the user's own words only
    if any(e.metadata.get("tainted") for e in episodes):
        meta["tainted"] = True
    user = " ".join(user_text(entry).split()) if user_text(entry) else ""
    out: list[StoredMemory] = list(episodes) + profile_memories(agent_id, entry, episodes)
    whole = {" ".join(e.value.split()).casefold(): e for e in episodes}
    for s in sentences(user):
        for kind, importance, rule in _RULES:
            if rule.search(s):
                text = s
                if kind == "fact":
                    text = rule.sub("", s).strip(" ,:") or s
                    text = text[0].upper() + text[1:]
                same = whole.get(" ".join(s.split()).casefold())
                if same is not None and kind != "fact":
                    same.type, same.importance = kind, importance  # one memory per text
                else:
                    out.append(StoredMemory(agent_id=agent_id, scope="agent", key=f"{kind}:{slug(text)}", value=text,
                                      type=kind, importance=importance, said_at=said, metadata=dict(meta),
                                      source_entry_ids=[eid]))
                break
    return out
