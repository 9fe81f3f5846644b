"""Project scope: a coding turn's work is remembered under its project, what the person says about
themselves stays agent-wide (CONTRACT §5, `metadata.project`).

A turn retained with `metadata.project` gets that project on each memory it leaves, unless the
memory is about the person — a first-person statement of a preference or a fact about themselves
("I prefer tabs", "my name is Ana", "I work at Acme", "always answer in French", "call me Sam").
The classifier is deliberately simple and generic (no client's words): a sentence-level pattern
over the person's words in the memory. A memory it misses stays in its project, which is the
safe side: work of one repository never shows in another. A recall sees memories of its own
project and those without one; a recall without a project sees only those without one.
"""

from __future__ import annotations

from typing import Any

import re2

from .record import StoredMemory

_ABOUT_THE_PERSON = re2.compile(
    r"(?i)(\bi\s+(really\s+|also\s+|usually\s+|always\s+)?(prefer|like|love|hate|dislike|enjoy|live|use)\b"
    r"|\bi\s+work\s+(at|for|as|in|on\s+weekends|from)\b"
    r"|\bi('| a)m\s+(a|an|from|based|allergic|vegetarian|vegan|left-handed|colou?r-?blind)\b"
    r"|\bmy\s+(name|favou?rite|preference|wife|husband|partner|son|daughter|kids?|children|dog|cat|birthday|"
    r"manager|boss|timezone|time\s+zone|pronouns|hometown|editor|shell|os|laptop)\b"
    r"|\bcall\s+me\b|\bfrom\s+now\s+on\b"
    r"|\b(please\s+)?(always|never)\s+(use|write|answer|reply|respond|call|format|add|put|run|commit)\b)")


def persons_words(value: str) -> str:
    """The person's part of a memory's text: before the tool line and the assistant's reply."""
    text = value[len("user: "):] if value.startswith("user: ") else value
    for mark in ("\ntools: ", "\nassistant: "):
        text = text.split(mark, 1)[0]
    return "" if text.startswith(("tools: ", "assistant: ")) else text


def about_the_person(value: str) -> bool:
    return _ABOUT_THE_PERSON.search(persons_words(value)) is not None


def project_of(metadata: dict[str, Any]) -> str | None:
    value = metadata.get("project") if isinstance(metadata, dict) else None
    return value if isinstance(value, str) and value else None


def scope_to_project(memories: list[StoredMemory], metadata: dict[str, Any]) -> list[StoredMemory]:
    """The turn's memories, each work memory marked with the retain's project (in place)."""
    project = project_of(metadata)
    if project is None:
        return memories
    for m in memories:
        if not about_the_person(m.value):
            m.metadata = {**(m.metadata or {}), "project": project}
    return memories


def memory_project(m: StoredMemory) -> str | None:
    return project_of(m.metadata)
