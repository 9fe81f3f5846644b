"""Rank a turn in its conversation: the answer sits beside the question that names the topic.

In a dialogue the words a question shares are often in the turn before the one that holds the
answer ("What did you do last weekend?" / "We went camping"), so a turn is judged with the
best of its two neighbours: the head of the ranking (the best `DEPTH` hits and the turns next
to them) is reordered by `score + WEIGHT x best neighbour's score`. A turn whose neighbours are
both off topic drops a little; one next to a strong hit rises. A turn that only asks
(`asks`) states nothing a later question could need, so it moves `ASKS_PENALTY` down.

Leave-one-conversation-out on LoCoMo's dev set chose these values (bench/results/HISTORY.md, "Ranking a
turn in its conversation").
"""

from __future__ import annotations

import math
from collections.abc import Container, Mapping, Sequence

import numpy as np

from .episodes import sentences
from .rowfacts import RowFacts

WEIGHT = 0.25  # share of the best neighbour's fused score a turn gains (z units)
DEPTH = 100  # hits reordered with their neighbours: a full block holds ~60 hits
ASKS_PENALTY = 8.0  # z units a turn that only asks moves down: below the head's statements


def asks(text: str) -> bool:
    """Every sentence is a question: a turn that asks and says nothing else."""
    if not text.rstrip().endswith("?"):  # most memories: no need to split them
        return False
    said = sentences(text)
    return bool(said) and all(s.endswith("?") for s in said)


def rerank(ranked: list[tuple[str, float]], around: Mapping[str, Sequence[str]], floor: float,
           asking: Container[str], *, weight: float | None = None, depth: int | None = None,
           penalty: float | None = None) -> list[tuple[str, float]]:
    """`ranked` (memory id, fused score), best first, with its head reordered in context; the rest
    after it unchanged. `around[id]`: the turns said just before and after it (none for a memory
    outside a conversation, which is then its own context); `floor`: the fused score of a memory
    no signal found, which a neighbour outside `ranked` counts as; `asking`: ids of turns that only
    ask. Unset weight, depth and penalty: the module's."""
    weight = WEIGHT if weight is None else weight
    depth = DEPTH if depth is None else depth
    penalty = ASKS_PENALTY if penalty is None else penalty
    if weight == 0 and penalty == 0:
        return ranked
    score, near_of = dict(ranked), around.get
    todo: dict[str, Sequence[str]] = {}  # the head and the turns beside it that `ranked` holds
    for d, _ in ranked[:depth]:
        todo[d] = near = near_of(d, ())
        for other in near:
            if other in score and other not in todo:
                todo[other] = near_of(other, ())
    ordered = []
    for d, near in todo.items():
        own = best = score[d]
        if near:
            best = -math.inf
            for other in near:
                got = score.get(other, floor)
                if got > best:
                    best = got
        ordered.append((-(own + weight * best - (penalty if d in asking else 0.0)), d))
    ordered.sort()  # best first; equal scores by id, as fusion breaks ties
    return [(d, -neg) for neg, d in ordered] + [pair for pair in ranked if pair[0] not in todo]


def rerank_rows(rows: np.ndarray, scores: np.ndarray, facts: RowFacts, floor: float, *,
                weight: float | None = None, depth: int | None = None, penalty: float | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """`rerank` over arrays (rowfacts.py): `rows` (lexical rows, distinct) with their `scores`,
    best first; a row's neighbours and whether it only asks are read from `facts`. The same
    order and scores as `rerank` over the rows' ids."""
    weight = WEIGHT if weight is None else weight
    depth = DEPTH if depth is None else depth
    penalty = ASKS_PENALTY if penalty is None else penalty
    n = len(rows)
    if (weight == 0 and penalty == 0) or not n:
        return rows, scores
    at = facts.at  # each ranked row's position, -1 elsewhere (put back before returning)
    at[rows] = np.arange(n)
    try:
        todo = np.zeros(n, dtype=bool)
        todo[:depth] = True
        near = facts.near[rows[:depth]]
        beside = at[near[near >= 0]]
        todo[beside[beside >= 0]] = True  # the head and the ranked turns beside it
        pos = np.flatnonzero(todo)
        own = scores[pos]
        near = facts.near[rows[pos]]
        has = near >= 0
        where = np.where(has, at[near], -1)
        got = np.where(where >= 0, scores[where], floor)  # a neighbour outside `rows` counts as `floor`
        got[~has] = -math.inf
        best = np.where(has.any(axis=1), got.max(axis=1), own)
        moved = own + weight * best - np.where(facts.asks[rows[pos]], penalty, 0.0)
    finally:
        at[rows] = -1
    order = facts.by_score_then_id(rows[pos], -moved)  # best first; equal scores by id
    rest = np.flatnonzero(~todo)
    return np.concatenate([rows[pos[order]], rows[rest]]), np.concatenate([moved[order], scores[rest]])
