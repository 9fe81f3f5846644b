"""What recall's in-context steps read of each memory, kept in arrays by lexical row.

Why: a recall reorders ~400 fused candidates (speakers.py, context.py, sittings.py) and then
drops repeated texts before packing; done over `(id, score)` pairs, each step looked every
candidate up in a dict, and together they were half of a recall's ranking CPU in the embedded
service's event loop at 32 recalls in flight (bench/results/HISTORY.md, "Many agents at once"). Kept here
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
    its neighbours (two slots, -1: none), and its id with a number that orders as the id does or
    ties (`id_order`: UTF-8 keeps code point order)."""

    ORDER_BYTES = 6  # of an id past the prefix every id shares: 48 bits, exact in a float64

    def __init__(self, ids: list[str | None]) -> None:
        self.live = np.zeros(64, dtype=bool)
        self.conditional = np.zeros(64, dtype=bool)
        self.sitting = np.full(64, NONE, dtype=np.int32)
        self.speaker = np.full(64, NONE, dtype=np.int32)
        self.norm = np.full(64, NONE, dtype=np.int32)
        self.asks = np.zeros(64, dtype=bool)
        self.near = np.full((64, 2), NONE, dtype=np.int32)
        self.ids = ids  # row → memory id: the lexical index's own list (lexical.py), never a copy
        self.id_order = np.zeros(64, dtype=np.float64)  # ORDER_BYTES of the id past `_prefix`, as a number
        self._prefix: bytes | None = None  # what every id put so far begins with
        self.at = np.full(64, NONE, dtype=np.int64)  # scratch: a row's position in one recall's ranking
        self.enabled = True  # recall's in-context steps run over these arrays (False: over (id, score) pairs)
        self._speakers: dict[str, int] = {}
        self._norms: dict[str, int] = {}  # text → its number
        self._saying = np.zeros(64, dtype=np.int32)  # number → how many memories say it
        self._codes = 0  # texts numbered so far

    def put(self, row: int, memory_id: str, *, conditional: bool, sitting: int | None, speaker: str | None,
            norm: str, asks: bool) -> None:
        self._fit(row)
        self.live[row] = True
        self.conditional[row] = conditional
        self.sitting[row] = NONE if sitting is None else sitting
        self.speaker[row] = NONE if speaker is None else self._speakers.setdefault(speaker, len(self._speakers))
        code = self._norms.get(norm)
        if code is None:  # numbers are not reused: as many as texts ever said
            code = self._norms[norm] = self._codes
            self._codes += 1
            if code >= len(self._saying):
                self._saying = np.concatenate([self._saying, np.zeros(len(self._saying), dtype=np.int32)])
        self._saying[code] += 1
        self.norm[row] = code
        self.asks[row] = asks
        self.near[row] = NONE
        key = _utf8(memory_id)
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
        """Every row's `id_order` again, past a shorter shared prefix (it only shortens: a few times
        in an index's life)."""
        for row, memory_id in enumerate(self.ids):
            if memory_id is not None:
                self.id_order[row] = self._number(_utf8(memory_id))

    def by_score_then_id(self, rows: np.ndarray, neg: np.ndarray) -> np.ndarray:
        """The order of `rows` by `neg` (up), then id: as Python sorts `(neg, id)` tuples. By one
        sort of (score, id number) pairs, then each run of equal pairs by its ids."""
        pair = np.empty(len(rows), dtype=np.complex128)  # sorted by real, then imaginary part
        pair.real = neg
        pair.imag = self.id_order[rows]
        order = np.argsort(pair)
        ranked = pair[order]
        same = ranked[1:] == ranked[:-1]
        if same.any():  # ids alike in their first bytes (and equal scores): each such run by its ids
            ids, at = self.ids, rows.tolist()
            edges = np.flatnonzero(np.diff(np.concatenate(([False], same, [False])).astype(np.int8)))
            for start, end in zip(edges[::2].tolist(), edges[1::2].tolist()):
                order[start:end + 1] = sorted(order[start:end + 1].tolist(), key=lambda i: (ids[at[i]], i))
        return order

    def drop(self, row: int, norm: str) -> None:
        self.live[row] = False
        code = self._norms.get(norm)
        if code is not None:
            self._saying[code] -= 1
            if self._saying[code] <= 0:
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
        self.sitting = np.concatenate([self.sitting, np.full(grow, NONE, dtype=np.int32)])
        self.speaker = np.concatenate([self.speaker, np.full(grow, NONE, dtype=np.int32)])
        self.norm = np.concatenate([self.norm, np.full(grow, NONE, dtype=np.int32)])
        self.asks = np.concatenate([self.asks, np.zeros(grow, dtype=bool)])
        self.near = np.concatenate([self.near, np.full((grow, 2), NONE, dtype=np.int32)])
        self.id_order = np.concatenate([self.id_order, np.zeros(grow, dtype=np.float64)])
        self.at = np.concatenate([self.at, np.full(grow, NONE, dtype=np.int64)])


def _utf8(memory_id: str) -> bytes:
    return memory_id.encode("utf-8", "surrogatepass")


def best_first(keys: np.ndarray, scores: np.ndarray, facts: RowFacts, limit: int | None) -> np.ndarray:
    """Positions of the best `limit` of `keys` (rows) by score, down, then id: the order
    `fusion.ordered` gives (only those at least as good as the `limit`-th are sorted)."""
    neg = -scores
    if limit is not None and 0 < limit < len(neg):
        kth = np.partition(neg, limit - 1)[limit - 1]
        sel = np.flatnonzero(neg <= kth)
        return sel[facts.by_score_then_id(keys[sel], neg[sel])][:limit]
    return facts.by_score_then_id(keys, neg)
