"""The fused ranking of one query, computed over arrays: both signals' candidates are keyed by
their lexical row, never turned into dicts of ids.

Why: a recall fuses up to 400 candidates of each signal. Done with a dict per signal, a set union
and a lookup per candidate and signal, that was half of a recall's ranking CPU (~1.1 of 2.2 ms at
1,600 memories; the embedded service's event loop, which every recall shares, was busy with it
under 32 recalls in flight: bench/results/HISTORY.md, "Many agents at once"). The ranking is the one
`fusion.z_fuse` gives over `fusion.Signal`s of the candidates — same scores, same order, ties by
id (`tests/test_fused_rows.py` checks it against that definition on random indexes).

What each signal says about a memory, as `fusion.Signal` defines it: BM25 for the lexical top `k`
(0 for the rest); cosine for the dense top `k`, and for a lexical candidate outside it (its exact
cosine when it has a vector; while it has none, `impute` of its lexical z-score: index.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from .fusion import Signal, by_id_in_runs, ordered


class RowLinks:
    """Which vector row holds the vector of which lexical row, both ways: rows of either index are
    never reused, so a link is written once, when a memory's vector is added."""

    def __init__(self) -> None:
        self.lex_of_vec = np.full(64, -1, dtype=np.int64)
        self.vec_of_lex = np.full(64, -1, dtype=np.int64)
        self._at = np.full(64, -1, dtype=np.int64)  # scratch: a row's position in one query's hits

    def link(self, lex_row: int, vec_row: int) -> None:
        self.lex_of_vec = _fit(self.lex_of_vec, vec_row)
        self.vec_of_lex = _fit(self.vec_of_lex, lex_row)
        self.lex_of_vec[vec_row] = lex_row
        self.vec_of_lex[lex_row] = vec_row

    def positions(self, rows: np.ndarray, dense_lex: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
        """Where each lexical candidate (`rows`) stands among the dense hits' lexical rows
        (`dense_lex`), and back (-1: not there); both distinct rows below `n`. By a scratch array
        of positions, not two sorts."""
        if len(dense_lex) and dense_lex.min() < 0:  # a vector not linked to a row: by sorting
            return _positions(rows, dense_lex), _positions(dense_lex, rows)
        if len(self._at) < n:
            self._at = np.full(max(n, 2 * len(self._at)), -1, dtype=np.int64)
        at = self._at
        at[dense_lex] = np.arange(len(dense_lex))
        at_dense = at[rows]
        at[dense_lex] = -1
        at[rows] = np.arange(len(rows))
        at_lex = at[dense_lex]
        at[rows] = -1
        return at_dense, at_lex

    def vec_rows(self, lex_rows: np.ndarray) -> np.ndarray:
        """The vector row of each lexical row (-1: no vector)."""
        out = np.full(len(lex_rows), -1, dtype=np.int64)
        known = lex_rows < len(self.vec_of_lex)
        out[known] = self.vec_of_lex[lex_rows[known]]
        return out


def _fit(a: np.ndarray, i: int) -> np.ndarray:
    while i >= len(a):
        a = np.concatenate([a, np.full(len(a), -1, dtype=np.int64)])
    return a


def fused(lexical, vectors, links: RowLinks, text: str, vector, k: int,
          impute: float, head: int | None = None) -> tuple[Iterable[tuple[str, float]], list[Signal]]:
    """(memory id, fused z-score) best first, and the signals (their moments: `Signal.floor`).
    `lexical`: lexical.LexicalIndex; `vectors`: dense.VectorIndex or None. `head`: how many the
    caller will likely read — then the ranking is an iterator that puts only those in order
    first (the rest when read on): a recall reads ~400 of up to ~800 candidates."""
    keys, scores, signals = fused_rows(lexical, vectors, links, text, vector, k, impute)
    return _ranked(lexical, keys, scores, head), signals


def fused_rows(lexical, vectors, links: RowLinks, text: str, vector, k: int,
               impute: float) -> tuple[np.ndarray, np.ndarray, list[Signal]]:
    """`fused` as arrays, in no order: the candidates' lexical rows, their fused z-scores, and the
    signals."""
    keys, raws, signals = _candidates(lexical, vectors, links, text, vector, k, impute)
    if not len(keys):
        return keys, _NONE_F, signals
    return keys, sum(s.z_of(raw) for s, raw in zip(signals, raws)), signals


def _candidates(lexical, vectors, links: RowLinks, text: str, vector, k: int,
                impute: float) -> tuple[np.ndarray, list[np.ndarray], list[Signal]]:
    lex = lexical.top(text, k)
    rows, lex_raw, lex_mean, lex_std = lex if lex is not None else (_NONE, _NONE_F, 0.0, 0.0)
    signals = [Signal({}, lex_mean, lex_std, missing=0.0)]
    if vector is None or vectors is None or not len(vectors):
        return rows, [lex_raw], signals
    vrows, cos, d_mean, d_std = vectors.top(vector, k)
    dense_lex = links.lex_of_vec[vrows]  # the dense hits' lexical rows
    # where each lexical candidate stands among the dense hits (-1: not among them), and back
    at_dense, at_lex = links.positions(rows, dense_lex, len(lexical.ids))
    dense_raw = np.full(len(rows), d_mean, dtype=np.float64)
    among = at_dense >= 0
    dense_raw[among] = cos[at_dense[among]]
    outside = ~among
    own = links.vec_rows(rows)
    exact = outside & (own >= 0)
    if exact.any():  # their exact cosine, in one product (as many rows, in the same order, as ever)
        dense_raw[exact] = (vectors.matrix[own[exact]] @ vector).astype(np.float64)
    unembedded = outside & ~exact
    if impute and lex_std > 1e-12 and unembedded.any():
        # still without a vector (the embedding backlog is behind, as after a burst of retains on a
        # slow CPU): the mean would rank a matching new memory below an embedded one that matches as
        # well; the two signals agree more often than not, so guess part of the way from its words
        scale = impute * d_std / lex_std
        dense_raw[unembedded] = d_mean + scale * (lex_raw[unembedded] - lex_mean)
    only_dense = at_lex < 0
    keys = np.concatenate([rows, dense_lex[only_dense]])
    lexical_raw = np.concatenate([lex_raw, np.zeros(int(only_dense.sum()))])
    dense_all = np.concatenate([dense_raw, cos[only_dense]])
    signals.append(Signal({}, d_mean, d_std, missing=d_mean))
    return keys, [lexical_raw, dense_all], signals


_NONE = np.zeros(0, dtype=np.int64)
_NONE_F = np.zeros(0, dtype=np.float64)


def _positions(these: np.ndarray, among: np.ndarray) -> np.ndarray:
    """For each of `these` (distinct rows), its index in `among` (distinct rows), or -1."""
    if not len(these) or not len(among):
        return np.full(len(these), -1, dtype=np.int64)
    order = np.argsort(among, kind="stable")
    found = np.searchsorted(among, these, sorter=order)
    found = np.minimum(found, len(among) - 1)
    at = order[found]
    return np.where(among[at] == these, at, -1)


def _ranked(lexical, keys: np.ndarray, scores: np.ndarray, head: int | None = None) -> Iterable[tuple[str, float]]:
    if not len(keys):
        return []
    ids = lexical.ids
    if head is None or not 0 < head < len(keys):
        return ordered([ids[r] for r in keys.tolist()], scores)
    return _in_parts(ids, keys, scores, head)


def _in_parts(ids: list, keys: np.ndarray, scores: np.ndarray, head: int) -> Iterator[tuple[str, float]]:
    """`ordered` over `keys`, the best `head` (and whoever ties with the last of them) put in order
    first and the rest only if read: the same sequence, as the order (score down, then id) is total."""
    order = np.argsort(-scores)
    best = scores[order]
    # the cut after `head`, moved past a run of equal scores (a run is put in id order as a whole)
    differs = np.flatnonzero(best[head:] != best[head - 1])
    cut = head + int(differs[0]) if len(differs) else len(best)
    yield from by_id_in_runs([ids[r] for r in keys[order[:cut]].tolist()], best[:cut])
    if cut < len(best):
        yield from by_id_in_runs([ids[r] for r in keys[order[cut:]].tolist()], best[cut:])
