"""A question about a kind of thing reaches the words the person used for it (engine/expansion.py)."""

from __future__ import annotations

import shutil
import time

import pytest

from memory_adapters.engine import expansion
from memory_adapters.engine.dense import Embedder, VectorIndex
from memory_adapters.engine.index import AgentIndex
from memory_adapters.engine.lexical import terms
from memory_adapters.engine.onnx_encoder import ModelIntegrityError
from memory_adapters.engine.record import StoredMemory

SPORTY = ["Ana: I started rock climbing at the gym downtown.",
          "Ana: The climbing wall was tough today but fun.",
          "Ana: We went kayaking on the lake last Sunday."]
EVERYDAY = ["I had a long day at the office and answered emails.", "My manager asked for the quarterly report.",
            "The bus was late again this morning.", "I cooked pasta for dinner tonight.",
            "My cat knocked over a plant.", "I need to renew my passport soon.",
            "The weather has been grey all week.", "I finally fixed the leaky tap.",
            "We watched a documentary about bees.", "I bought new curtains for the bedroom.",
            "My phone battery dies so fast.", "Work has been busy with the product launch at the office.",
            "I read a novel about a lighthouse keeper.", "My neighbour plays the piano every evening.",
            "The dentist appointment went fine.", "I ordered groceries online.",
            "The office coffee machine broke.", "I'm learning to make sourdough bread.",
            "My sister called about the family reunion.", "I cleaned out the garage.",
            "The train strike messed up my commute.", "I'm saving up for a new laptop.",
            "We hosted friends for a board game night.", "I planted tomatoes on the balcony.",
            "I had a cold for three days.", "The landlord is raising the rent.",
            "I tried a new Thai restaurant.", "I spent the evening knitting a scarf."]
QUESTION = "What sports does Ana do?"


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder.load()


@pytest.fixture(scope="module")
def ana(embedder) -> AgentIndex:
    texts = [f"Ana: {t}" for t in EVERYDAY] + SPORTY
    vectors = embedder.embed(texts)
    idx = AgentIndex(vectors=VectorIndex(vectors.shape[1]))
    for n, (text, vector) in enumerate(zip(texts, vectors)):
        idx.put(StoredMemory(agent_id="ana", scope="agent", key=f"episode:e{n}", value=text, type="episode",
                             importance=0.5, id=f"ep_{n:03d}", said_at=1.7e9 + n * 86400, created_at=1.7e9 + n * 86400,
                             metadata={}), vector)
    return idx


def ranking(idx: AgentIndex, vector, weight: float, monkeypatch) -> dict[str, tuple[int, float]]:
    monkeypatch.setattr(expansion, "WEIGHT", weight)
    got = idx._ranked(QUESTION, vector, 400, time.time(), None, None, True)
    return {d: (rank, score) for rank, (d, score) in enumerate(got)}


def test_a_question_about_a_kind_of_thing_lifts_the_turns_that_name_one(ana, embedder, monkeypatch):
    vector = embedder.embed([QUESTION])[0]
    chosen = ana.expansion_terms(QUESTION, vector)
    assert "climb" in chosen  # what Ana said twice about a sport, though the question never says it
    assert not set(chosen) & set(terms(QUESTION + " Ana"))  # never the question's own words or whom it names
    assert "kayak" not in chosen  # said once: no topic of hers yet
    on, off = ranking(ana, vector, expansion.WEIGHT, monkeypatch), ranking(ana, vector, 0.0, monkeypatch)
    climbing = [f"ep_{len(EVERYDAY) + k:03d}" for k in (0, 1)]
    errand = "ep_002"  # "The bus was late again this morning.": nothing near a sport
    for turn in climbing:
        assert on[turn][0] <= off[turn][0]
        assert on[turn][1] - off[turn][1] > on[errand][1] - off[errand][1]  # they gain more than an errand


def test_a_recall_without_the_questions_vector_is_not_expanded(ana, embedder, monkeypatch):
    # the words-only deadline path (schedule.py) has no vector to find near words with
    assert ana.expansion_terms(QUESTION, None) == []
    assert ranking(ana, None, expansion.WEIGHT, monkeypatch) == ranking(ana, None, 0.0, monkeypatch)


def test_an_unreadable_word_table_leaves_recall_as_it_was_without_expansion(ana, embedder, monkeypatch):
    vector = embedder.embed([QUESTION])[0]
    off = ranking(ana, vector, 0.0, monkeypatch)
    monkeypatch.setattr(expansion, "_TABLE", None)
    monkeypatch.setattr(expansion, "_FAILED", ModelIntegrityError("word table fails its checksum"))
    assert ana.expansion_terms(QUESTION, vector) == []
    assert ranking(ana, vector, expansion.WEIGHT, monkeypatch) == off


def test_a_word_table_that_fails_its_checksum_is_refused(tmp_path):
    for name in ("model.json", "words.npz"):
        shutil.copy(expansion.MODEL_DIR / name, tmp_path / name)
    assert len(expansion.WordTable.load(tmp_path).terms) > 10_000
    raw = bytearray((tmp_path / "words.npz").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (tmp_path / "words.npz").write_bytes(bytes(raw))
    with pytest.raises(ModelIntegrityError, match="checksum"):
        expansion.WordTable.load(tmp_path)


def test_a_large_vocabulary_keeps_its_vectors_and_chooses_as_a_small_one_does(monkeypatch):
    # a small agent gathers its terms' vectors per recall (no copy per agent); a large one keeps
    # them: either way the same terms come back
    words = expansion.table()
    said = words.terms[:3000]
    postings = {t: {0: 1, 1: 1} for t in said}  # every term in two memories of a large store
    vector = words.vectors[words.row[said[7]]]
    chosen = []
    for keep_from in (10**9, 100):
        monkeypatch.setattr(expansion, "KEEP_FROM", keep_from)
        vocabulary = expansion.Vocabulary()
        vocabulary.saw(said, words)
        assert (vocabulary.matrix is not None) == (keep_from == 100)
        chosen.append(vocabulary.nearest(vector, postings, 10_000, set(), words))
    assert chosen[0] == chosen[1] and chosen[0][0] == said[7]
