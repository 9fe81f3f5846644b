"""Query expansion by word meaning: the agent's words nearest the question, as a second BM25 query.

A question asking for a set ("What activities does Ana do?") shares few words with the turns that
answer it ("I signed up for a pottery class", "we went camping"): BM25 finds none of them, and the
question's MiniLM vector ranks them among many of Ana's turns. The words of the agent's own memories
whose meaning is nearest the question's ("pottery", "camping", "hiking" for "activities") are what
those turns say, so recall scores them as a second BM25 query and adds `WEIGHT` x its z-score to
every hit, after the engine's other steps (embedding-based query expansion, Kuzi et al. 2016).

* A word's meaning is the shipped encoder's vector of the word alone: a table of the tokenizer's
  whole English words, one vector per BM25 term, built once by `export_words.py` (`model/words.npz`,
  checksummed in `model.json`) — nothing is embedded at run time.
* Only the agent's own terms can be chosen, held by at least `MIN_DOCS` of its memories (a word
  said once is no topic) and at most `MAX_SHARE` of them (a common word finds everything), and not
  the question's own words or the names of the people it asks about (they found their hits already).
* A recall without the question's vector (the words-only deadline path) is not expanded.

Chosen on LoCoMo's dev set and on longer conversations made of two of its conversations
(`python -m bench.quality.loo --experiment expansion`, `python -m bench.quality.longer`;
docs/quality.md, "Query expansion by word meaning"). Patterns: none (the lexical index's own terms).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

# z units of the expansion query's BM25 score a hit gains (0: off; MEMPLANE_QUERY_EXPANSION=off)
WEIGHT = 0.0 if os.environ.get("MEMPLANE_QUERY_EXPANSION", "").strip().lower() in ("off", "0", "false", "no") else 0.1
TERMS = 20  # expansion terms: the agent's words nearest the question
MIN_DOCS = 2  # a term held by fewer memories is no topic of the agent's
MAX_SHARE = 0.02  # nor one held by more than this share of them
SCAN = 200  # nearest terms looked at before the filters: bounds a recall's Python work
# known terms from which an agent keeps their vectors (1.5 KB a term): below, a recall gathers them
# (~0.25 ms for a LoCoMo conversation's 1,159), so a thousand small agents do not hold a copy each
KEEP_FROM = 2048

MODEL_DIR = Path(__file__).parent / "model"


class WordTable:
    """The shipped table: term → row, and each row's unit vector (float32, ~21 MB in memory)."""

    def __init__(self, terms: Iterable[str], vectors: np.ndarray) -> None:
        self.terms = list(terms)
        self.row = {t: i for i, t in enumerate(self.terms)}
        self.vectors = vectors

    @classmethod
    def load(cls, model_dir: Path = MODEL_DIR) -> "WordTable":
        """The table `model.json` names, once its checksum holds (onnx_encoder.ModelIntegrityError)."""
        import json

        from .onnx_encoder import ModelIntegrityError, sha256

        try:
            entry = json.loads((model_dir / "model.json").read_text())["words"]
            path = model_dir / entry["file"]
            expected = entry["sha256"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ModelIntegrityError(f"the model manifest names no word table: {exc}") from exc
        if not path.is_file() or sha256(path) != expected:
            raise ModelIntegrityError(f"word table {path} is missing or fails its checksum; reinstall memplane, "
                                      "or rebuild it with `python -m memory_adapters.engine.export_words`")
        with np.load(path) as doc:
            vectors = doc["vectors"].astype(np.float32) * doc["scale"][:, None]
            return cls([str(t) for t in doc["terms"]], vectors)


_TABLE: WordTable | None = None
_FAILED: Exception | None = None  # why the table could not be read: expansion stays off, it is not read again
_TABLE_LOCK = threading.Lock()


def loaded() -> WordTable | None:
    """The table if it was read already (indexing never reads it)."""
    return _TABLE


def table() -> WordTable:
    """The process's table, read once (~0.3 s: `dense.Embedder.load` reads it with the encoder, so no
    recall waits for it); raises the reason it cannot be read, every time, without reading again."""
    global _TABLE, _FAILED
    if _TABLE is None:
        with _TABLE_LOCK:
            if _TABLE is None:
                if _FAILED is not None:
                    raise _FAILED
                try:
                    _TABLE = WordTable.load()
                except Exception as exc:  # noqa: BLE001 - whatever it is, recall goes on without expansion
                    _FAILED = exc
                    raise
    return _TABLE


class Vocabulary:
    """One agent's terms that the table knows, in the order they were first indexed (append only:
    a term no memory holds any more fails `MIN_DOCS` when it is read)."""

    def __init__(self) -> None:
        self.terms: list[str] = []
        self.rows = np.zeros(0, dtype=np.int64)
        self.matrix: np.ndarray | None = None  # the rows' vectors, kept once there are KEEP_FROM of them
        self._seen: set[str] = set()
        self._pending: list[str] = []  # seen before the table was read: looked up when it is

    def saw(self, terms: Iterable[str], words: WordTable | None) -> None:
        """Note the terms of a memory just indexed (`words`: None until the table is loaded)."""
        for t in terms:
            if t not in self._seen:
                self._seen.add(t)
                self._pending.append(t)
        if words is not None and self._pending:
            self._flush(words)

    def _flush(self, words: WordTable) -> None:
        found = [(t, words.row[t]) for t in self._pending if t in words.row]
        self._pending = []
        if found:
            self.terms += [t for t, _ in found]
            rows = np.fromiter((r for _, r in found), dtype=np.int64, count=len(found))
            self.rows = np.concatenate([self.rows, rows])
            if self.matrix is not None:
                self.matrix = np.concatenate([self.matrix, words.vectors[rows]])
            elif len(self.rows) >= KEEP_FROM:
                self.matrix = words.vectors[self.rows]

    def nearest(self, vector: Any, postings: dict[str, Any], docs: int, known: set[str],
                words: WordTable, n_terms: int | None = None) -> list[str]:
        """The `n_terms` terms nearest `vector` that pass the filters (module docstring), nearest first."""
        n_terms = TERMS if n_terms is None else n_terms
        if self._pending:
            self._flush(words)
        if not len(self.rows) or n_terms <= 0:
            return []
        q = np.asarray(vector, dtype=np.float32).ravel()
        norm = float(np.linalg.norm(q))
        if not norm or q.shape[0] != words.vectors.shape[1]:  # another encoder's vector: no table for it
            return []
        vectors = self.matrix if self.matrix is not None else words.vectors[self.rows]
        sims = vectors @ (q / norm)
        scan = min(SCAN, len(sims))
        head = np.argpartition(-sims, scan - 1)[:scan] if scan < len(sims) else np.arange(len(sims))
        head = head[np.argsort(-sims[head], kind="stable")]
        most = max(MIN_DOCS, MAX_SHARE * docs)  # a small store: a term two memories hold still counts
        out: list[str] = []
        for i in head.tolist():
            t = self.terms[i]
            df = len(postings.get(t, ()))
            if t in known or df < MIN_DOCS or df > most:
                continue
            out.append(t)
            if len(out) >= n_terms:
                break
        return out


def z_of_rows(lexical: Any, terms: list[str]) -> np.ndarray | None:
    """Each lexical row's z-score for the BM25 query `terms` (by row; a row no term found scores the
    floor), or None when the query finds nothing to tell apart."""
    got = lexical.every(terms) if terms else None
    if got is None:
        return None
    rows, scores, mean, std = got
    if std <= 1e-12:
        return None
    z = np.full(len(lexical.ids), -mean / std, dtype=np.float64)
    z[rows] = (scores - mean) / std
    return z
