"""Two-level ranking: a sitting that matches the question lifts its other turns.

People talk about one thing at a time. When the question's words and meaning find a few turns of
one sitting (one session's conversation on one day), the rest of that sitting is more likely to
hold the parts that share no word with the question ("What does she do with her family on
hikes?" finds the turns about the hike; "We roasted marshmallows" is said three turns on, which
the best neighbour alone, context.py, does not reach). So recall scores the sittings first, by
the mean of their best `TOP` hits (a hit below the mean counts 0), and every turn gains `WEIGHT`
x its sitting's score; a sitting with a single strong hit gains a third as much as one with three. The whole ranking a recall reads is reordered (the turns this
lifts into the block ranked 60th-300th before), after the speaker and context steps.

Only episodes that state something have a sitting: a typed memory (a fact, a preference), a
turn that only asks and an assistant's reply are each a sitting of their own.
Chosen leave-one-conversation-out on LoCoMo's dev set (bench/results/HISTORY.md, "Memory that connects").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import numpy as np

WEIGHT = 0.4  # share of its sitting's score a turn gains (fused z units)
TOP = 3  # a sitting's score: the mean of its best TOP hits (a missing one, or one below 0, counts 0)


@dataclass
class Sittings:
    """Which sitting each episode was said in, as a number (numbers are kept for the index's life:
    there are as many as (session, day) pairs ever seen, far fewer than memories)."""

    of: dict[str, int] = field(default_factory=dict)  # episode id → its sitting's number
    numbers: dict[tuple[str | None, str], int] = field(default_factory=dict)  # (session, day) → number

    def put(self, m: Any, day: str, alone: bool = False) -> None:
        """`m` said under `day` (the stamp or date its run is filed under, packing.Snippet.day). A turn
        that only asks (context.asks) or an assistant's reply kept beside a turn (record.a_reply) is
        `alone`, a sitting of its own: the questions a user asked today do not lift each other, and a
        question that matches such a memory does not lift the person's turns said around it."""
        if m.type == "episode" and not alone:
            self.of[m.id] = self.numbers.setdefault((m.session_id, day), len(self.numbers))
        else:
            self.of.pop(m.id, None)

    def drop(self, memory_id: str) -> None:
        self.of.pop(memory_id, None)

    def lifted(self, ranked: list[tuple[str, float]], weight: float | None = None, top: int | None = None
               ) -> list[tuple[str, float]]:
        """`ranked` (id, score), best first, with each episode's score raised by `weight` x the mean of
        its sitting's best `top` scores in `ranked` (each at least 0); a memory without a sitting is one
        of its own (it gains `weight / top` x its own score). Best first again, equal scores in their
        order; unchanged when weight is 0. In numpy: a recall reorders ~400 hits (0.12 ms, not 0.27)."""
        weight = WEIGHT if weight is None else weight
        n = len(ranked)
        if not weight or n < 2:
            return ranked
        ids, raw = zip(*ranked)
        scores = np.fromiter(raw, dtype=np.float64, count=n)
        codes = np.fromiter(map(self.of.get, ids, repeat(-1, n)), dtype=np.int64, count=n)
        order, scores = lift(codes, scores, weight, top)
        return list(zip(map(ids.__getitem__, order.tolist()), scores.tolist()))


def lift(codes: np.ndarray, scores: np.ndarray, weight: float | None = None, top: int | None = None
         ) -> tuple[np.ndarray, np.ndarray]:
    """`Sittings.lifted` over arrays: `codes` the sitting of each hit (-1: none), `scores` best
    first. Returns the new order (positions) and the lifted scores in that order."""
    weight = WEIGHT if weight is None else weight
    top = max(1, TOP if top is None else top)
    n = len(scores)
    if not weight or n < 2:
        return np.arange(n), scores
    _, group = np.unique(codes, return_inverse=True)
    by_group = np.argsort(group, kind="stable")  # each sitting's hits together, best first
    g = group[by_group]
    best = np.ones(n, dtype=bool)  # among the first `top` of its sitting
    best[top:] = g[top:] != g[:-top]
    share = weight / top
    counted = np.maximum(scores, 0.0)  # a hit below the mean counts as a missing one
    lifted = share * np.bincount(g[best], weights=counted[by_group[best]])[group]
    alone = codes < 0
    lifted[alone] = share * counted[alone]
    lifted += scores
    order = np.argsort(-lifted, kind="stable")
    return order, lifted[order]
