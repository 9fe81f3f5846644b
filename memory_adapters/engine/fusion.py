"""Rank by lexical and dense evidence together, each put on the same scale per query.

A fixed blend of raw scores (0.7 BM25 + 0.3 cosine) lets whichever score has the wider range
decide; z-scores ask instead "how unusual is this memory's score for this query?", so a
memory that stands out on either signal rises, and one that stands out on both rises most.
On LoCoMo's dev set this beat both reciprocal-rank fusion and either signal alone
(bench/results/HISTORY.md, "LoCoMo").
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import repeat

import numpy as np


@dataclass
class Signal:
    """One ranking signal for one query: raw scores of its candidates, the mean and standard
    deviation of that score over all of the agent's memories, and the score of a memory it has
    no score for (0 for BM25: no query term; the mean for cosine: not embedded yet)."""

    scores: dict[str, float]
    mean: float
    std: float
    missing: float
    weight: float = 1.0

    def z(self, doc_ids: list[str]) -> np.ndarray:
        return self.z_of(np.array(list(map(self.scores.get, doc_ids, repeat(self.missing, len(doc_ids)))),
                                  dtype=np.float64))

    def z_of(self, raw: np.ndarray) -> np.ndarray:
        """z-scores of raw scores (float64)."""
        if self.std <= 1e-12:  # one memory, or all alike: a match is all this signal can tell
            return self.weight * (raw > self.missing)
        return self.weight * (raw - self.mean) / self.std

    def floor(self) -> float:
        """The z-score of a memory this signal has no score for."""
        if self.std <= 1e-12:
            return 0.0
        return self.weight * (self.missing - self.mean) / self.std


def z_fuse(signals: list[Signal]) -> list[tuple[str, float]]:
    """Sum of per-signal z-scores over the union of every signal's candidates, best first
    (equal scores: by id, so a ranking never depends on set order)."""
    ids = list(set().union(*(s.scores for s in signals)))
    if not ids:
        return []
    return ordered(ids, sum(s.z(ids) for s in signals))


def ordered(ids: list[str], fused: np.ndarray) -> list[tuple[str, float]]:
    """`ids` with their fused scores, best first (equal scores: by id)."""
    order = np.argsort(-fused)
    return by_id_in_runs(list(map(ids.__getitem__, order.tolist())), fused[order])


def by_id_in_runs(ids: list[str], best: np.ndarray) -> list[tuple[str, float]]:
    """`ids` with their scores `best` (already best first), each run of equal scores in id order
    (`ids` is sorted in place: a run's scores are equal, so its ids alone are sorted)."""
    same = best[1:] == best[:-1]
    if same.any():  # memories alike (a turn said again): each run of equal scores in id order
        edges = np.flatnonzero(np.diff(np.concatenate(([False], same, [False])).astype(np.int8)))
        for start, end in zip(edges[::2].tolist(), edges[1::2].tolist()):
            ids[start:end + 1] = sorted(ids[start:end + 1])
    return list(zip(ids, best.tolist()))
