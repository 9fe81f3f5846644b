"""Recall fuses its two signals over arrays (`engine/fused.py`) for speed; what it ranks must be
exactly what `fusion.z_fuse` gives over one `Signal` per signal, as the definition below builds
them (the lexical top k, the dense top k, a lexical candidate's exact cosine or, with no vector
yet, its imputed one). Random indexes with memories dropped, put again, not embedded yet, said
twice (equal scores), and both the exact and the prefiltered vector search."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

from memory_adapters.engine import index
from memory_adapters.engine.dense import VectorIndex
from memory_adapters.engine.fusion import Signal, z_fuse
from memory_adapters.engine.index import AgentIndex
from memory_adapters.engine.record import StoredMemory

DIM = 16
WORDS = "dentist budget garden piano fence train lease puppy report flight hotel chess".split()


def by_definition(idx: AgentIndex, text: str, vector, k: int) -> list[tuple[str, float]]:
    """The fused ranking as the signals define it, with a dict per signal."""
    lex_hits, lex_mean, lex_std = idx.lexical.scored(text, k)
    signals = [Signal(dict(lex_hits), lex_mean, lex_std, missing=0.0)]
    if vector is not None and idx.vectors is not None and len(idx.vectors):
        dense_hits, d_mean, d_std = idx.vectors.scored(vector, k)
        dense = dict(dense_hits)
        todo = [(d, idx.vectors.rows[d]) for d, _ in lex_hits if d not in dense and d in idx.vectors.rows]
        if todo:
            cos = idx.vectors.matrix[[r for _, r in todo]] @ vector
            dense.update(zip((d for d, _ in todo), cos.tolist()))
        if index.IMPUTE_DENSE and lex_std > 1e-12:
            scale = index.IMPUTE_DENSE * d_std / lex_std
            for d, s in lex_hits:
                if d not in dense:
                    dense[d] = d_mean + scale * (s - lex_mean)
        signals.append(Signal(dense, d_mean, d_std, missing=d_mean))
    return z_fuse(signals)


def memory(i: int, text: str) -> StoredMemory:
    return StoredMemory(agent_id="a", scope="agent", key=f"episode:{i}", value=text, type="episode",
                        id=f"m{i:04d}", said_at=1_700_000_000.0 + i, created_at=1_700_000_000.0 + i)


def unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def built(seed: int, n: int, prefilter: bool) -> tuple[AgentIndex, random.Random, np.random.Generator]:
    rnd, rng = random.Random(seed), np.random.default_rng(seed)
    idx = AgentIndex(vectors=VectorIndex(DIM))
    if prefilter:
        idx.vectors.EXACT_UP_TO, idx.vectors.RESCORED, idx.vectors.SAMPLE = 20, 15, 10
    twin = None
    for i in range(n):
        text = " ".join(rnd.choices(WORDS, k=rnd.randint(1, 6)))
        vec = unit(rng)
        if rnd.random() < 0.1 and twin is not None:  # the same words and meaning again: equal scores
            text, vec = twin
        twin = (text, vec)
        idx.put(memory(i, text), None if rnd.random() < 0.2 else vec)  # a fifth not embedded yet
    ids = list(idx.memories)
    for d in rnd.sample(ids, n // 10):
        idx.drop(d)
    for d in rnd.sample(list(idx.memories), n // 10):  # put again (a new lexical row), some re-embedded
        m = idx.memories[d]
        idx.put(m, unit(rng) if rnd.random() < 0.5 else None)
    for d in rnd.sample(list(idx.memories), n // 20):  # the backlog catches up on some
        idx.add_vector(d, unit(rng))
    return idx, rnd, rng


@pytest.mark.parametrize("prefilter", [False, True])
@pytest.mark.parametrize("seed", range(12))
def test_recall_fuses_exactly_as_the_signals_define(seed, prefilter, monkeypatch):
    idx, rnd, rng = built(seed, 60 + 20 * seed, prefilter)
    now = time.time()
    for impute in (index.IMPUTE_DENSE, 0.0):
        monkeypatch.setattr(index, "IMPUTE_DENSE", impute)
        for _ in range(8):
            text = " ".join(rnd.choices(WORDS + ["unknown"], k=rnd.randint(1, 3)))
            vector = unit(rng) if rnd.random() < 0.85 else None
            for k in (3, 25, 400):
                expected = list(idx._shown(by_definition(idx, text, vector, k), now, None))
                assert idx._ranked(text, vector, k, now, None, None, False) == expected


def test_recall_by_words_alone_fuses_as_defined():
    idx = AgentIndex()  # embeddings off
    rnd = random.Random(5)
    for i in range(50):
        idx.put(memory(i, " ".join(rnd.choices(WORDS, k=3))))
    for text in ("dentist", "garden fence", "unknown words"):
        assert idx._ranked(text, None, 400, time.time(), None, None, False) == by_definition(idx, text, None, 400)


@pytest.mark.parametrize("seed", range(6))
def test_a_recall_that_reads_the_head_gets_the_same_head_and_the_rest_on_demand(seed):
    """Recall reads the best ~400 of up to ~800 candidates, so only those are put in order first;
    when filters hide some of them the ranking goes on past the head, in the same order."""
    idx, rnd, rng = built(seed, 120 + 40 * seed, False)
    now = time.time()
    hidden = set(rnd.sample(list(idx.memories), len(idx.memories) // 3))
    for _ in range(8):
        text = " ".join(rnd.choices(WORDS, k=rnd.randint(1, 3)))
        vector = unit(rng) if rnd.random() < 0.85 else None
        for visible in (None, lambda m: m.id not in hidden):
            whole = idx._ranked(text, vector, 400, now, visible, None, False)
            for limit in (1, 2, 7, 30, 400):
                assert idx._ranked(text, vector, 400, now, visible, limit, False) == whole[:limit]
