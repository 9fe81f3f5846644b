"""The person's current situation as keyed facts: one memory per profile topic (home city, job).

A first-person statement ("I now live in Porto", "I started as a nurse") becomes the fact
`profile:<topic>`; a later statement of the same topic replaces it (the newest by when it was
said wins: the store decides, `newer`). The turn that stated a value notes it in its episode's
`metadata["profile"]`, so that once the value changes that turn is shown as past (updates.py).
Both engines (embedded, tiered) store these from every retained turn.
"""

from __future__ import annotations

import re
from typing import Any

from memplane_core.turn_text import user_text

from .record import StoredMemory

PROFILE = "profile:"
_PLACE = r"(?P<v>[A-Z][\w'-]+(?:[ -][A-Z][\w'-]+)*)"
_ROLE = r"(?:an? )?(?P<v>[a-z][a-z -]{2,40}?)(?=[,.;!?]| at | for | in | with | which | and | this | last | since |$)"
# Bounded patterns (no nested repetition; the role is at most 40 characters), so linear in the text.
PROFILE_RULES: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    ("home", "Current home city: {v}.", re.compile(
        rf"\bI(?:'ve| have)? (?:just |recently |finally |now )?(?:moved|relocated) (?:back )?(?:to|into) {_PLACE}")),
    ("home", "Current home city: {v}.", re.compile(rf"\bI (?:now |currently |still )?live in {_PLACE}")),
    ("home", "Current home city: {v}.", re.compile(rf"\bI'm (?:now |currently )?(?:based|living) in {_PLACE}")),
    ("job", "Current job: {v}.", re.compile(rf"\bI (?:now |currently )?work as {_ROLE}")),
    ("job", "Current job: {v}.", re.compile(rf"\b(?:started|starting|start) (?:a new job |work |working )?as {_ROLE}")),
    ("job", "Current job: {v}.", re.compile(rf"\bmy new (?:job|role|position) (?:is )?as {_ROLE}")),
)


def profile_facts(text: str) -> list[tuple[str, str]]:
    """(topic, canonical fact) pairs stated in `text`; the last statement of a topic wins."""
    found: dict[str, str] = {}
    for slot, template, rule in PROFILE_RULES:
        for m in rule.finditer(text):
            found[slot] = template.format(v=m.group("v").strip())
    return list(found.items())


def profile_memories(agent_id: str, entry: dict[str, Any], episodes: list[StoredMemory]) -> list[StoredMemory]:
    """The keyed facts the person's own words in `entry` state, drawn beside `episodes` (the turn's,
    non-empty); the first episode notes the values it stated (updates.earlier_turns reads them)."""
    user = " ".join(user_text(entry).split()) if user_text(entry) else ""
    stated = profile_facts(user)
    if not stated:
        return []
    first = episodes[0]
    first.metadata["profile"] = dict(stated)
    meta: dict[str, Any] = {"session_id": first.session_id} if first.session_id else {}
    meta["origin"] = "user"  # drawn from the user's own words only
    if any(e.metadata.get("tainted") for e in episodes):
        meta["tainted"] = True
    return [StoredMemory(agent_id=agent_id, scope="agent", key=f"{PROFILE}{slot}", value=fact, type="fact",
                         importance=0.8, said_at=first.said_at, metadata={**meta, "slot": slot},
                         source_entry_ids=[entry["id"]]) for slot, fact in stated]


def newer(m: StoredMemory, current: StoredMemory | None) -> bool:
    """Whether `m` may replace `current`, the stored memory of its key: a profile fact said
    earlier than the stored one (a late retain, a backfill, an export listed newest first) does
    not."""
    return not (current is not None and m.key.startswith(PROFILE) and m.said_at is not None
                and (current.said_at or 0) > m.said_at)
