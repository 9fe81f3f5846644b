"""Coverage over repetition: the best hits re-ranked by what each adds (maximal marginal relevance).

A question whose answer is a set, or is said across sessions, needs *different* evidence in the
3,000-token block; the ranking's head often holds several turns of one sitting (one session's
turns of a day, sittings.py) that restate the same thing, lifted together by their sitting. So the
best `DEPTH` hits are taken greedily, and a hit from a sitting that already placed one above it
loses `PENALTY` z units when under `NOVEL` of its indexed terms are new among the hits placed so
far. A second hit of a sitting that says something new keeps its place; a memory without a sitting
is never a repeat. Leave-one-conversation-out on the dev set (bench/quality/loo.py --experiment
novelty, docs/quality.md) chose these values on two of three splits; by vector similarity or one
hit per date (the fourteenth session's MMR) it gained nothing.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection

import numpy as np

DEPTH = 120  # hits re-ranked: packing reads about the first 60-100
PENALTY = 0.5  # z units a repeat of a placed sitting loses (0: off)
NOVEL = 0.7  # a repeat with at least this share of new terms is not one


def order(sittings: list[int], scores: list[float], words: Callable[[int], Collection[str]],
          penalty: float | None = None, novel: float | None = None) -> tuple[list[int], list[float]]:
    """Positions of the hits (`sittings[i]`: hit i's sitting, negative for none; `scores` best
    first; `words(i)`: its terms) in the new order, with their adjusted scores: each time, the
    best adjusted score (the earlier hit on a tie). Lazily (CELF): a hit's adjusted score only
    falls as hits are placed, so it is recomputed only when it reaches the top of the heap."""
    penalty = PENALTY if penalty is None else penalty
    novel = NOVEL if novel is None else novel
    heap = [(-s, i, False) for i, s in enumerate(scores)]  # already in heap order: best first
    said: set[str] = set()
    placed: set[int] = set()
    out, adjusted = [], []
    while heap:
        key, i, final = heap[0]
        if not final and sittings[i] >= 0 and sittings[i] in placed:
            w = words(i)
            if w and sum(t not in said for t in w) < novel * len(w):
                heapq.heapreplace(heap, (key + penalty, i, True))  # a repeat: moved down once, for good
                continue
        heapq.heappop(heap)
        out.append(i)
        adjusted.append(-key)
        said.update(words(i))
        if sittings[i] >= 0:
            placed.add(sittings[i])
    return out, adjusted


def diversified_rows(rows: np.ndarray, scores: np.ndarray, sitting: np.ndarray, ids: list, docs: dict,
                     depth: int = DEPTH) -> tuple[np.ndarray, np.ndarray]:
    """`rows` (lexical rows, best first) and their `scores` with the first `depth` re-ranked; the
    rest keep their order, their scores capped at the head's last so the scores stay best first."""
    if not PENALTY or len(rows) < 2:
        return rows, scores
    head = rows[:depth]
    got, adjusted = order(sitting[head].tolist(), scores[:depth].tolist(),
                          lambda i: docs[d][0] if (d := ids[int(head[i])]) in docs else ())
    new_rows = rows.copy()
    new_rows[:len(got)] = head[got]
    new_scores = scores.astype(np.float64, copy=True)
    new_scores[:len(got)] = adjusted
    if len(rows) > len(got):
        new_scores[len(got):] = np.minimum(new_scores[len(got):], adjusted[-1])
    return new_rows, new_scores


def diversified(ranked: list[tuple[str, float]], of: dict[str, int], docs: dict, depth: int = DEPTH
                ) -> list[tuple[str, float]]:
    """`diversified_rows` over (id, score) pairs; `of`: each episode's sitting."""
    if not PENALTY or len(ranked) < 2:
        return ranked
    head, tail = ranked[:depth], ranked[depth:]
    got, adjusted = order([of.get(d, -1) for d, _ in head], [s for _, s in head],
                          lambda i: docs[head[i][0]][0] if head[i][0] in docs else ())
    floor = adjusted[-1]
    return [(head[i][0], s) for i, s in zip(got, adjusted)] + [(d, min(s, floor)) for d, s in tail]
