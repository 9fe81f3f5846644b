"""An incremental BM25 index over one agent's memories.

Incremental matters: memories arrive one retain at a time, and rebuilding a whole index on
every write (what batch BM25 libraries do) would put that cost on the next recall. Search
cost is the length of the query terms' rarer posting lists, not the number of memories: a
common term (in over 2% of documents, once there are 2,000) only adds its share of the score to
documents that a rarer query term found. Postings live in dicts (cheap to update one memory at a
time) and are scored as numpy arrays, built per term on first use and then kept in step with the
dicts (`Postings`): a search at 100k memories walked ~1,200 postings in Python for 0.8 ms, and
with one agent in flight each recall follows a retained turn, whose terms' arrays were rebuilt.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Callable

import numpy as np
import Stemmer

COMMON_TERM_MIN_DOCS = 2_000  # below this every posting list is walked in full
COMMON_TERM_SHARE = 0.02  # a term in more than 2% of the documents counts as common
_WORD = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
STOPWORDS = frozenset(
    "a an and are as at be been but by can could did do does doing for from had has have having he her "
    "here hers him his how i i'm if in into is it it's its just me my myself no nor not now of off on "
    "once only or our ours out over own same she should so some such than that that's the their theirs "
    "them then there these they this those through to too under until up very was we were what when "
    "where which while who whom why will with would you your yours yourself also about again any "
    "because before after being both down during each few further more most other ok okay yes yeah "
    "let tell know think really thing things got get like just well oh hi hello thanks thank please "
    "remember".split()
)


# Snowball's English (Porter2) stemmer, in C (PyStemmer): 'moved'/'moves'/'moving' and
# 'sisters'/'sister' meet as before, by the IR community's rules rather than ours. Leave-one-
# conversation-out against the suffix strip it replaced: the same default ranking on every
# conversation, the words-only deadline path 0.857 against 0.852, and half the time per turn
# (bench/results/HISTORY.md, "Stemming").
_STEMMER = Stemmer.Stemmer("english", 100_000)  # with a cache of the last 100k words


def terms(text: str) -> list[str]:
    return _STEMMER.stemWords([w.replace("'", "") for w in _WORD.findall(text.lower())
                               if w not in STOPWORDS and len(w) > 1])


class LexicalIndex:
    # b 0.4, not the textbook 0.75: a long turn is rarely padding, and a short one ("What time is it?")
    # should not win on its length alone (chosen leave-one-conversation-out, bench/README.md)
    def __init__(self, k1: float = 1.2, b: float = 0.4) -> None:
        self.k1 = k1
        self.b = b
        self.docs: dict[str, tuple[Counter[str], int]] = {}  # doc → (term counts, row)
        self.postings: dict[str, dict[int, int]] = {}  # term → {row: count}
        self.total_len = 0
        self.ids: list[str | None] = []  # row → doc; a re-added doc takes a new row (newest last)
        self.lengths = np.zeros(64)
        self._arrays: dict[str, Postings] = {}  # term → its postings as arrays, once a search used them
        self._acc = np.zeros(64)  # scratch scores, all zero between searches

    def __len__(self) -> int:
        return len(self.docs)

    def add(self, doc_id: str, text: str) -> None:
        self.remove(doc_id)
        tf = Counter(terms(text))
        row = len(self.ids)
        if row >= len(self.lengths):
            self.lengths = np.concatenate([self.lengths, np.zeros_like(self.lengths)])
            self._acc = np.zeros(len(self.lengths))
        self.ids.append(doc_id)
        length = sum(tf.values())
        self.lengths[row] = length
        self.docs[doc_id] = (tf, row)
        self.total_len += length
        for term, n in tf.items():
            self.postings.setdefault(term, {})[row] = n
            arrays = self._arrays.get(term)
            if arrays is not None:
                arrays.append(row, n)

    def remove(self, doc_id: str) -> None:
        old = self.docs.pop(doc_id, None)
        if old is None:
            return
        tf, row = old
        self.ids[row] = None
        self.total_len -= int(self.lengths[row])
        for term in tf:
            plist = self.postings.get(term)
            if plist is not None:
                plist.pop(row, None)
                if not plist:
                    del self.postings[term]
            arrays = self._arrays.get(term)
            if arrays is not None and (not plist or not arrays.remove(row)):
                del self._arrays[term]

    def _postings(self, term: str) -> tuple[np.ndarray, np.ndarray] | None:
        arrays = self._arrays.get(term)
        if arrays is None:
            plist = self.postings.get(term)
            if not plist:
                return None
            self._arrays[term] = arrays = Postings(plist)
        return arrays.rows[:arrays.used], arrays.counts[:arrays.used]

    def scored(self, query: str | list[str], k: int = 50) -> tuple[list[tuple[str, float]], float, float]:
        """The best `k` documents with the mean and standard deviation of BM25 over *all* documents
        (those no query term found score 0), so a caller can put scores on a common scale."""
        got = self.top(query, k)
        if got is None:
            return [], 0.0, 0.0
        rows, scores, mean, std = got
        ids = self.ids  # tolist(): one conversion for all, not a numpy scalar per hit
        return [(ids[c], s) for c, s in zip(rows.tolist(), scores.tolist())], mean, std

    def every(self, query: list[str]) -> tuple[np.ndarray, np.ndarray, float, float] | None:
        """Every row a term of `query` finds, unsorted, with its score, and the mean and standard
        deviation over all documents (as `top`, without choosing a best few)."""
        cand, scores = self._score(query)
        n = len(self.docs)
        if cand is None or not n:
            return None
        mean = float(scores.sum()) / n
        return cand, scores, mean, math.sqrt(max(0.0, float((scores * scores).sum()) / n - mean * mean))

    def top(self, query: str | list[str], k: int = 50) -> tuple[np.ndarray, np.ndarray, float, float] | None:
        """`scored` as arrays: the best `k` rows (`ids[row]` is the document) and their scores, with
        the mean and standard deviation; None when no query term is indexed."""
        got = self.every(terms(query) if isinstance(query, str) else query)
        if got is None:
            return None
        cand, scores, mean, std = got
        return (*_best(cand, scores, k), mean, std)

    def _score(self, q: list[str]) -> tuple[np.ndarray | None, np.ndarray | None]:
        if not q or not self.docs:
            return None, None
        n = len(self.docs)
        k1, acc = self.k1, self._acc
        # BM25 per posting: w·f / (f + base + per·len(doc))
        # (every document may be words the index leaves out — "Hi there, how are you?": length 0)
        base, per = k1 * (1 - self.b), k1 * self.b / (self.total_len / n) if self.total_len else 0.0
        plists = sorted((p for p in map(self._postings, set(q)) if p is not None), key=lambda p: len(p[0]))
        common_from = max(COMMON_TERM_MIN_DOCS, int(n * COMMON_TERM_SHARE))
        found: list[np.ndarray] = []
        for rows, tf in plists:
            w = math.log(1 + (n - len(rows) + 0.5) / (len(rows) + 0.5)) * (k1 + 1)
            if len(rows) > common_from and found:
                # A common term only adds to documents a rarer term already found.
                hit = acc[rows] > 0
                rows, tf = rows[hit], tf[hit]
            else:
                found.append(rows)
            acc[rows] += w * tf / (tf + base + per * self.lengths[rows])
        if not found:
            return None, None
        # every row a term found now scores above 0: a scan for them is sorted and unique, and
        # far cheaper than np.unique of the postings (5 vs 100 µs for 1,500 postings over 1,451 rows)
        cand = np.flatnonzero(acc[:len(self.ids)]) if len(found) > 1 else found[0]
        scores = acc[cand]
        acc[cand] = 0.0
        return cand, scores

    def search(self, query: str | list[str], k: int = 50,
               allow: Callable[[str], bool] | None = None) -> list[tuple[str, float]]:
        """The best `k` documents by BM25 (ties: the older first), skipping those `allow` refuses."""
        q = terms(query) if isinstance(query, str) else query
        cand, scores = self._score(q)
        if cand is None:
            return []
        order = np.lexsort((cand, -scores))  # best first; equal scores: the older row first
        ids = self.ids
        want = k
        while True:  # filter lazily: only as many candidates as it takes to find k allowed ones
            top = order[:want]
            kept = [(ids[cand[i]], float(scores[i])) for i in top]
            if allow is not None:
                kept = [(d, s) for d, s in kept if allow(d)]
            if len(kept) >= k or len(top) < want:
                return kept[:k]
            want *= 4


class Postings:
    """One term's postings as arrays, rows ascending (the dict's order: a new row is the highest)
    and each row's count as a float — what `np.fromiter` over the dict gives, kept in step with it
    by `append` and `remove` instead of rebuilt after every change (tests/test_lexical_arrays.py).
    Arrays handed out before a change are never written: an append goes past them, a removal
    makes new arrays."""

    __slots__ = ("rows", "counts", "used")

    def __init__(self, plist: dict[int, int]) -> None:
        self.used = len(plist)
        self.rows = np.fromiter(plist.keys(), dtype=np.int64, count=self.used)
        self.counts = np.fromiter(plist.values(), dtype=np.float64, count=self.used)

    def append(self, row: int, count: int) -> None:
        if self.used == len(self.rows):  # room for as many again: appends cost O(1) on average
            self.rows = np.concatenate([self.rows, np.empty(max(4, self.used), dtype=np.int64)])
            self.counts = np.concatenate([self.counts, np.empty(max(4, self.used), dtype=np.float64)])
        self.rows[self.used] = row
        self.counts[self.used] = count
        self.used += 1

    def remove(self, row: int) -> bool:
        """Leave `row` out; False when it is not there (the caller drops these arrays)."""
        rows = self.rows[:self.used]
        at = int(np.searchsorted(rows, row))
        if at == self.used or rows[at] != row:
            return False
        self.rows, self.counts = np.delete(rows, at), np.delete(self.counts[:self.used], at)
        self.used -= 1
        return True


def _best(cand: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The best `k` rows by score (equal scores: the older row first) and their scores. Only the
    rows scoring at least the k-th best are sorted: a common query word finds most of an agent's
    memories, and sorting them all was a third of the search."""
    neg = -scores
    if len(cand) > 2 * k:
        kth = np.partition(neg, k - 1)[k - 1]
        sel = np.flatnonzero(neg <= kth)  # the k best and whoever ties with the last of them
        order = sel[np.lexsort((cand[sel], neg[sel]))][:k]
    else:
        order = np.lexsort((cand, neg))[:k]
    return cand[order], scores[order]
