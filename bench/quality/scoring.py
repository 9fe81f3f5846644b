"""Scoring: a question counts when every evidence turn is recognisably in the injected block."""

from __future__ import annotations

import html
import random
import re
from collections import defaultdict

from .generator import CATEGORIES, Conversation, Question


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", html.unescape(text)).casefold()


def answered(block: str | None, question: Question) -> bool:
    if not block:
        return False
    hay = _norm(block)
    return all(_norm(needle) in hay for needle in question.needles)


def score(results: list[tuple[Question, str | None]]) -> dict[str, float]:
    """Share of questions answered, per category and overall."""
    hits: dict[str, list[bool]] = defaultdict(list)
    for question, block in results:
        ok = answered(block, question)
        hits[question.category].append(ok)
        hits["all"].append(ok)
    return {cat: (sum(v) / len(v) if v else 0.0) for cat, v in
            [(c, hits.get(c, [])) for c in (*CATEGORIES, "all")]}


def baseline_newest(conv: Conversation, k: int = 8) -> str:
    return "\n".join(t.text for t in conv.turns()[-k:])


def baseline_random(conv: Conversation, rng: random.Random, k: int = 8) -> str:
    return "\n".join(t.text for t in rng.sample(conv.turns(), k))
