"""A question about a person ranks what that person said first.

Chat logs and multi-party agents write a turn as `Name: text`. A question that names one of
those speakers ("What activities does Ana do?") is answered by Ana's own turns, one here and one
there across sessions, while her name matches as many of the other speaker's turns ("Glad it
helped, Ana!") — and past the few best hits the fused scores are flat, so those fill the block.
Recall adds `BOOST` (z units) to each hit spoken by a person the question names, before the turns
are ranked in their conversation (context.py). A question that names both speakers moves both;
memories without a `Name:` prefix (most agents' turns) are never moved. Chosen leave-one-
conversation-out on LoCoMo's dev set (bench/results/HISTORY.md, "Memory that connects").
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from operator import itemgetter

import numpy as np
import re2

BOOST = 5.0  # z units: above the flat tail of the ranking, below a strong match by someone else
MIN_TURNS = 2  # a prefix seen once is not yet a speaker ("Note: …")
_SPEAKER = re2.compile(r"^([A-Z][A-Za-z'.\-]{1,30}): ")  # a capitalised single name before a colon
_NAME = re2.compile(r"[A-Z][A-Za-z]+")  # a capitalised word in a question
_score = itemgetter(1)


def speaker_of(text: str) -> str | None:
    m = _SPEAKER.match(text)
    return m.group(1) if m else None


@dataclass
class Speakers:
    """Who said each memory (when its text names a speaker), and how many turns each speaker has."""

    of: dict[str, str] = field(default_factory=dict)
    turns: Counter[str] = field(default_factory=Counter)

    def put(self, memory_id: str, text: str) -> None:
        self.drop(memory_id)
        name = speaker_of(text)
        if name is not None:
            self.of[memory_id] = name
            self.turns[name] += 1

    def drop(self, memory_id: str) -> None:
        name = self.of.pop(memory_id, None)
        if name is not None:
            self.turns[name] -= 1
            if self.turns[name] <= 0:
                del self.turns[name]

    def named_in(self, question: str) -> set[str]:
        """The speakers a question names (as written, with a capital)."""
        if not self.turns:
            return set()
        turns = self.turns
        return {w for w in _NAME.findall(question) if turns.get(w, 0) >= MIN_TURNS}

    def boosted(self, ranked: list[tuple[str, float]], question: str, boost: float | None = None
                ) -> list[tuple[str, float]]:
        """`ranked` (id, fused score) with the hits spoken by someone the question names moved up by
        `boost`, best first again; unchanged when it names none."""
        boost = BOOST if boost is None else boost
        names = self.named_in(question) if boost else set()
        if not names:
            return ranked
        of = self.of.get
        moved: list[tuple[str, float]] = []
        rest: list[tuple[str, float]] = []
        for pair in ranked:
            if of(pair[0]) in names:
                moved.append((pair[0], pair[1] + boost))
            else:
                rest.append(pair)
        if not moved:
            return ranked
        # two runs already in order: one stable merge (equal scores keep fusion's order, by id)
        out = moved + rest
        out.sort(key=_score, reverse=True)
        return out

    def boosted_rows(self, rows: np.ndarray, scores: np.ndarray, question: str, speaker: np.ndarray,
                     codes: Callable[[set[str]], np.ndarray], boost: float | None = None
                     ) -> tuple[np.ndarray, np.ndarray]:
        """`boosted` over arrays: `speaker[row]` the number of who said it (-1: no one),
        `codes(names)` the numbers of the named speakers. The same order and scores."""
        boost = BOOST if boost is None else boost
        names = self.named_in(question) if boost else set()
        if not names:
            return rows, scores
        moved = np.isin(speaker[rows], codes(names))
        if not moved.any():
            return rows, scores
        first = np.concatenate([np.flatnonzero(moved), np.flatnonzero(~moved)])
        new = np.concatenate([scores[moved] + boost, scores[~moved]])
        order = np.argsort(-new, kind="stable")  # as `list.sort(reverse=True)`: equal scores keep their order
        return rows[first[order]], new[order]
