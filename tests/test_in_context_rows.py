"""Recall's in-context steps run over arrays by lexical row (`engine/rowfacts.py`) for speed; the
ranking and every recall's blocks must be exactly what the same steps give over `(id, score)`
pairs (speakers.boosted, context.rerank, sittings.lifted, then each text once): random
conversations of two speakers with turns said again (equal scores), questions, turns only asking,
expiring and session-scoped memories, memories dropped and put again, and ids that sort
differently as text than as they were put."""

from __future__ import annotations

import random
import time

import numpy as np
import pytest

from memory_adapters.engine import context, sittings
from memory_adapters.engine.dense import VectorIndex
from memory_adapters.engine.index import AgentIndex, RecallQuery, RankedRows, visible_in
from memory_adapters.engine.record import StoredMemory

DIM = 16
WORDS = "dentist budget garden piano fence train lease puppy report flight hotel chess".split()
START = 1_700_000_000.0


def unit(rng: np.random.Generator) -> np.ndarray:
    v = rng.standard_normal(DIM).astype(np.float32)
    return v / np.linalg.norm(v)


def built(seed: int, n: int) -> tuple[AgentIndex, random.Random, np.random.Generator]:
    rnd, rng = random.Random(seed), np.random.default_rng(seed)
    idx = AgentIndex(vectors=VectorIndex(DIM))
    said = []
    for i in range(n):
        if said and rnd.random() < 0.25:  # said again: the same words and meaning, equal scores
            text, vec = rnd.choice(said)
        else:
            text = f"{rnd.choice(['Ana', 'Ben', 'Cy'])}: " + " ".join(rnd.choices(WORDS, k=rnd.randint(1, 6)))
            if rnd.random() < 0.15:
                text += "?"  # a turn that only asks
            vec = unit(rng)
            said.append((text, vec))
        at = START + i * 60 + rnd.choice([0, 0, 86_400 * rnd.randint(0, 3)])
        kind = "episode" if rnd.random() < 0.85 else "fact"
        m = StoredMemory(agent_id="a", scope="session" if rnd.random() < 0.1 else "agent", key=f"{kind}:{i}",
                         value=text, type=kind, session_id=rnd.choice(["s1", "s2"]),
                         id=f"{rnd.choice('zam')}{rnd.randint(0, 10**6):07d}-{i}", said_at=at, created_at=at,
                         expires_at=(time.time() - 5 if rnd.random() < 0.5 else time.time() + 3600)
                         if rnd.random() < 0.1 else None)
        idx.put(m, None if rnd.random() < 0.2 else vec)
    for d in rnd.sample(list(idx.memories), n // 10):
        idx.drop(d)
    for d in rnd.sample(list(idx.memories), n // 10):  # put again: a new lexical row
        idx.put(idx.memories[d], unit(rng) if rnd.random() < 0.5 else None)
    return idx, rnd, rng


def by_pairs(idx: AgentIndex, fn):
    idx.facts.enabled = False  # the `(id, score)` steps, as before the arrays
    try:
        return fn()
    finally:
        idx.facts.enabled = True


@pytest.mark.parametrize("seed", range(10))
def test_in_context_ranking_over_rows_is_the_ranking_over_pairs(seed):
    idx, rnd, rng = built(seed, 80 + 30 * seed)
    now = time.time()
    for _ in range(10):
        text = " ".join(rnd.choices(WORDS + ["Ana", "Ben", "unknown"], k=rnd.randint(1, 4)))
        vector = unit(rng) if rnd.random() < 0.8 else None
        for visible in (None, visible_in("s1", now), visible_in(None, now, None)):
            for k, limit in ((400, 400), (25, 10), (400, None), (5, 3)):
                rows = idx._ranked(text, vector, k, now, visible, limit, True)
                assert isinstance(rows, RankedRows)
                pairs = by_pairs(idx, lambda: idx._ranked(text, vector, k, now, visible, limit, True))
                assert not isinstance(pairs, RankedRows)
                assert list(rows) == pairs


@pytest.mark.parametrize("seed", range(10))
def test_every_recall_packs_the_same_blocks_over_rows_as_over_pairs(seed):
    idx, rnd, rng = built(seed, 120 + 40 * seed)
    for _ in range(8):
        text = " ".join(rnd.choices(WORDS + ["Ana", "Cy"], k=rnd.randint(1, 4)))
        q = RecallQuery(text, vector=unit(rng) if rnd.random() < 0.8 else None, budget_tokens=rnd.choice([300, 3000]))
        visible = visible_in(rnd.choice([None, "s2"]), time.time())
        assert idx.recall(q, visible) == by_pairs(idx, lambda: idx.recall(q, visible))


@pytest.mark.parametrize("seed", range(4))
def test_the_steps_constants_still_apply_over_rows(seed, monkeypatch):
    """The quality bench sets the steps' constants per run (bench/quality/loo.py): both paths read them."""
    idx, rnd, rng = built(seed, 150)
    now = time.time()
    for weight, depth, lift in ((0.0, 100, 0.4), (1.0, 5, 0.0), (0.25, 1, 1.5)):
        monkeypatch.setattr(context, "WEIGHT", weight)
        monkeypatch.setattr(context, "DEPTH", depth)
        monkeypatch.setattr(sittings, "WEIGHT", lift)
        text = " ".join(rnd.choices(WORDS, k=3))
        vector = unit(rng)
        assert list(idx._ranked(text, vector, 400, now, None, 400, True)) == by_pairs(
            idx, lambda: idx._ranked(text, vector, 400, now, None, 400, True))


def test_a_filter_other_than_visible_takes_the_pairs_path_and_is_obeyed():
    idx, rnd, rng = built(3, 100)
    hidden = set(rnd.sample(list(idx.memories), 30))
    ranked = idx._ranked("garden fence", unit(rng), 400, time.time(), lambda m: m.id not in hidden, 400, True)
    assert not isinstance(ranked, RankedRows)
    assert ranked and not hidden & {d for d, _ in ranked}


@pytest.mark.parametrize("seed", range(6))
def test_rows_order_by_score_then_id_as_python_orders_pairs(seed):
    """Ids sharing long prefixes (and then not), of any length and beyond ASCII, scores that tie."""
    from memory_adapters.engine.rowfacts import RowFacts

    rnd = random.Random(seed)
    ids: list[str | None] = []
    facts = RowFacts(ids)  # reads the row → id list its owner (the lexical index) keeps
    for row in range(300):
        if row == 150:  # an id that shortens the prefix every id shares: every row renumbered
            ids.append("x")
        else:
            ids.append("mem_same_" + "".join(rnd.choices("ab0é\u4e2d", k=rnd.randint(0, 12))))
        facts.put(row, ids[-1], conditional=False, sitting=None, speaker=None, norm=ids[-1], asks=False)
        if row in (40, 149, 299):
            rows = np.array(rnd.sample(range(row + 1), min(row + 1, 120)), dtype=np.int64)
            neg = np.array([rnd.choice([-1.5, -1.0, -0.0, 0.0, 2.0]) for _ in rows])
            want = sorted(range(len(rows)), key=lambda i: (neg[i], ids[rows[i]]))
            assert facts.by_score_then_id(rows, neg).tolist() == want
