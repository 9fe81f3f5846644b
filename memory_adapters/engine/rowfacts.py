"""What recall's in-context steps read of each memory, kept in arrays by lexical row.

Why: a recall reorders ~400 fused candidates (speakers.py, context.py, sittings.py) and then
drops repeated texts before packing; done over `(id, score)` pairs, each step looked every
candidate up in a dict, and together they were half of a recall's ranking CPU in the embedded
service's event loop at 32 recalls in flight (bench/README.md, "Many agents at once"). Kept here
by the memory's lexical row (fused.py keys candidates by it), the same steps are a few array
operations per recall. Lexical rows are never reused (a memory put again takes a new row), so a
row's facts are written when its memory is indexed and its neighbours whenever `around` changes.
"""

from __future__ import annotations

import os

import numpy as np

NONE = -1


class RowFacts:
    """Per lexical row: indexed now, may be hidden by a `Visible`, the sitting and the speaker (as
    numbers, -1: none), the text said (a number per distinct `Snippet.norm`), only asks, the rows of
    its neighbours (two slots, -1: none), and its id as UTF-8 bytes (ordered as Python orders str)
    with a number that orders the same (`id_order`) or ties."""

    ID_WIDTH = 40
    ORDER_BYTES = 6  # of an id past the prefix every id shares: 48 bits, exact in a float64

    def __init__(self) -> None:
        self.live = np.zeros(64, dtype=bool)
        self.conditional = np.zeros(64, dtype=bool)
        self.sitting = np.full(64, NONE, dtype=np.int64)
        self.speaker = np.full(64, NONE, dtype=np.int64)
        self.norm = np.full(64, NONE, dtype=np.int64)
        self.asks = np.zeros(64, dtype=bool)
        self.near = np.full((64, 2), NONE, dtype=np.int64)
        self.id_key = np.zeros(64, dtype=f"S{self.ID_WIDTH}")
        self.id_order = np.zeros(64, dtype=np.float64)  # ORDER_BYTES of the id past `_prefix`, as a number
        self._prefix: bytes | None = None  # what every id put so far begins with
        self.at = np.full(64, NONE, dtype=np.int64)  # scratch: a row's position in one recall's ranking
        self.sortable = True  # every id orders as its bytes (none holds a NUL)
        self._speakers: dict[str, int] = {}
        self._norms: dict[str, list[int]] = {}  # text → [its number, memories saying it]
        self._next_norm = 0

    def put(self, row: int, memory_id: str, *, conditional: bool, sitting: int | None, speaker: str | None,
            norm: str, asks: bool) -> None:
        self._fit(row)
        self.live[row] = True
        self.conditional[row] = conditional
        self.sitting[row] = NONE if sitting is None else sitting
        self.speaker[row] = NONE if speaker is None else self._speakers.setdefault(speaker, len(self._speakers))
        got = self._norms.get(norm)
        if got is None:
            got = self._norms[norm] = [self._next_norm, 0]
            self._next_norm += 1
        got[1] += 1
        self.norm[row] = got[0]
        self.asks[row] = asks
        self.near[row] = NONE
        key = memory_id.encode("utf-8", "surrogatepass")  # UTF-8 keeps code point order
        if b"\0" in key:
            self.sortable = False
        if len(key) > self.id_key.dtype.itemsize:
            self.id_key = self.id_key.astype(f"S{max(len(key), 2 * self.id_key.dtype.itemsize)}")
        self.id_key[row] = key
        if self._prefix is None:
            self._prefix = key
        elif not key.startswith(self._prefix):
            self._prefix = os.path.commonprefix([self._prefix, key])
            self._renumber()
        self.id_order[row] = self._number(key)

    def _number(self, key: bytes) -> float:
        assert self._prefix is not None
        start = len(self._prefix)
        return float(int.from_bytes(key[start:start + self.ORDER_BYTES].ljust(self.ORDER_BYTES, b"\0"), "big"))

    def _renumber(self) -> None:
        """Every row's `id_order` again, past a shorter shared prefix (it only shortens: rarely)."""
        width = self.id_key.dtype.itemsize
        start = len(self._prefix or b"")
        cut = np.zeros((len(self.id_key), self.ORDER_BYTES), dtype=np.uint8)
        have = self.id_key.view(np.uint8).reshape(len(self.id_key), width)[:, start:start + self.ORDER_BYTES]
        cut[:, :have.shape[1]] = have
        self.id_order = (cut.astype(np.float64) * (256.0 ** np.arange(self.ORDER_BYTES - 1, -1, -1))).sum(axis=1)

    def by_score_then_id(self, rows: np.ndarray, neg: np.ndarray) -> np.ndarray:
        """The order of `rows` by `neg` (up), then id: as Python sorts `(neg, id)` tuples. By one
        sort of (score, id number) pairs; by the ids' bytes when two of those tie."""
        pair = np.empty(len(rows), dtype=np.complex128)  # sorted by real, then imaginary part
        pair.real = neg
        pair.imag = self.id_order[rows]
        order = np.argsort(pair)
        ranked = pair[order]
        if len(ranked) > 1 and (ranked[1:] == ranked[:-1]).any():
            return np.lexsort((self.id_key[rows], neg))
        return order

    def drop(self, row: int, norm: str) -> None:
        self.live[row] = False
        got = self._norms.get(norm)
        if got is not None:
            got[1] -= 1
            if got[1] <= 0:
                del self._norms[norm]

    def link(self, row: int, near: list[int]) -> None:
        """The rows of the turns said beside `row` (index.AgentIndex.around, at most two)."""
        self.near[row] = NONE
        self.near[row, :len(near)] = near

    def speakers_named(self, names: set[str]) -> np.ndarray:
        return np.fromiter((self._speakers[n] for n in names if n in self._speakers), dtype=np.int64)

    def _fit(self, row: int) -> None:
        n = len(self.live)
        if row < n:
            return
        grow = max(n, row + 1 - n)
        self.live = np.concatenate([self.live, np.zeros(grow, dtype=bool)])
        self.conditional = np.concatenate([self.conditional, np.zeros(grow, dtype=bool)])
        self.sitting = np.concatenate([self.sitting, np.full(grow, NONE, dtype=np.int64)])
        self.speaker = np.concatenate([self.speaker, np.full(grow, NONE, dtype=np.int64)])
        self.norm = np.concatenate([self.norm, np.full(grow, NONE, dtype=np.int64)])
        self.asks = np.concatenate([self.asks, np.zeros(grow, dtype=bool)])
        self.near = np.concatenate([self.near, np.full((grow, 2), NONE, dtype=np.int64)])
        self.id_key = np.concatenate([self.id_key, np.zeros(grow, dtype=self.id_key.dtype)])
        self.id_order = np.concatenate([self.id_order, np.zeros(grow, dtype=np.float64)])
        self.at = np.concatenate([self.at, np.full(grow, NONE, dtype=np.int64)])


def best_first(keys: np.ndarray, scores: np.ndarray, facts: RowFacts, limit: int | None) -> np.ndarray:
    """Positions of the best `limit` of `keys` (rows) by score, down, then id: the order
    `fusion.ordered` gives (only those at least as good as the `limit`-th are sorted)."""
    neg = -scores
    if limit is not None and 0 < limit < len(neg):
        kth = np.partition(neg, limit - 1)[limit - 1]
        sel = np.flatnonzero(neg <= kth)
        return sel[facts.by_score_then_id(keys[sel], neg[sel])][:limit]
    return facts.by_score_then_id(keys, neg)
