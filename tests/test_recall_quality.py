"""Recall quality: the evaluation harness is trustworthy, and hybrid recall finds the right memories."""

from __future__ import annotations

import asyncio
import random

import pytest

from bench.quality.generator import CATEGORIES, generate
from bench.quality.scoring import answered, baseline_random, score
from memplane_core.contract import RecallRequest, RetainRequest


def test_generator_is_deterministic_and_covers_every_category():
    a, b = generate(seed=3, conversations=2), generate(seed=3, conversations=2)
    assert [t.text for c in a for t in c.turns()] == [t.text for c in b for t in c.turns()]
    assert [q.text for c in a for q in c.questions] == [q.text for c in b for q in c.questions]
    assert generate(seed=4, conversations=1)[0].turns()[0].text != a[0].turns()[0].text or \
        generate(seed=4, conversations=1)[0].questions[0].needles != a[0].questions[0].needles
    conv = a[0]
    assert len(conv.sessions) == 20 and all(15 <= len(s.turns) <= 30 + 20 for s in conv.sessions)
    assert {q.category for q in conv.questions} == set(CATEGORIES)
    turns = {t.id: t.text for t in conv.turns()}
    for q in conv.questions:  # every needle sits in its evidence turn and in no other turn
        for tid, needle in zip(q.evidence, q.needles):
            assert needle.lower() in turns[tid].lower()
            assert [i for i, text in turns.items() if needle.lower() in text.lower()] == [tid]
    dates = [s.date for s in conv.sessions]
    assert dates == sorted(dates) and len(set(dates)) == len(dates)


def test_scorer_gives_an_oracle_full_marks_and_random_turns_low_marks():
    convs = generate(seed=0, conversations=4)
    oracle = []
    for c in convs:
        turns = {t.id: t.text for t in c.turns()}
        oracle += [(q, "<memories>" + "".join(f"<memory>{turns[e]}</memory>" for e in q.evidence) + "</memories>")
                   for q in c.questions]
    assert score(oracle)["all"] == 1.0
    rng = random.Random(5)
    assert score([(q, baseline_random(c, rng)) for c in convs for q in c.questions])["all"] < 0.2
    q = convs[0].questions[6]  # multi-hop: one evidence turn is not enough
    turns = {t.id: t.text for t in convs[0].turns()}
    assert not answered(turns[q.evidence[0]], q) and answered(turns[q.evidence[0]] + turns[q.evidence[1]], q)


def _entry(eid: str, text: str, date: str, session: str = "s1") -> dict:
    return {"id": eid, "ts": f"{date}T12:00:00.000Z", "session_id": session,
            "request_original": {"messages": [{"role": "system", "content": f"Today is {date}."},
                                              {"role": "user", "content": text}]},
            "response": {"format": "json", "json": {"choices": [{"message": {"content": "OK."}}]}}}


@pytest.fixture
async def hybrid(tiered):
    _, service = tiered
    assert service.embedder is not None, "the shipped MiniLM did not load"
    return service


EVERYDAY_TURNS = ["My grandmother taught me to knit when I was seven.", "The printer on the third floor jams a lot.",
                  "I can't stand the smell of cilantro, it tastes like soap to me.",
                  "We are repainting the kitchen next month.", "Traffic was terrible on the bridge this morning."]


async def _tell(svc, agent_id: str, texts: list[str]) -> None:
    """Retain each text as a turn, then wait until their vectors are in (they follow the retain)."""
    for i, t in enumerate(texts):
        await svc.retain(RetainRequest(agent_id=agent_id, entry=_entry(f"hist1_{agent_id}{i}", t, f"2024-03-0{i + 1}")))
    for _ in range(2400):
        if not svc.embedding_backlog:
            return
        await asyncio.sleep(0.025)
    raise AssertionError("the vectors of retained turns never arrived")


async def test_a_paraphrased_question_finds_its_memory_with_embeddings(hybrid):
    svc = hybrid
    await _tell(svc, "para", EVERYDAY_TURNS)
    blocks = await svc.recall(RecallRequest(agent_id="para", query="Which herb do I dislike?", top_k=2))
    assert "cilantro" in blocks[0].text


async def test_questions_asked_at_once_each_find_their_own_memory(hybrid):
    """Concurrent recalls share encoder calls (QueryBatcher): each gets the answer it gets alone."""
    svc = hybrid
    await _tell(svc, "many", EVERYDAY_TURNS)
    questions = {"Which herb do I dislike?": "cilantro", "Who taught me to knit?": "grandmother",
                 "Which device keeps jamming?": "printer", "How was my commute over the bridge?": "Traffic"}
    answers = await asyncio.gather(*(svc.recall(RecallRequest(agent_id="many", query=q, top_k=2))
                                     for q in questions))
    assert [word in blocks[0].text for word, blocks in zip(questions.values(), answers)] == [True] * 4


async def test_the_newer_of_two_conflicting_facts_ranks_first(hybrid):
    svc = hybrid
    await svc.retain(RetainRequest(agent_id="upd", entry=_entry("hist1_a", "I live in Lisbon, near the river.", "2024-01-10")))
    await svc.retain(RetainRequest(agent_id="upd", entry=_entry("hist1_b", "I relocated to Vienna in the spring.", "2024-05-02")))
    # a late retain of an even older statement must not roll the fact back
    await svc.retain(RetainRequest(agent_id="upd", entry=_entry("hist1_c", "I live in Porto these days.", "2023-06-01")))
    blocks = await svc.recall(RecallRequest(agent_id="upd", query="Which city do I live in now?"))
    text = "\n".join(b.text for b in blocks)
    assert "Current home city: Vienna." in text  # the keyed fact holds the newest statement only
    assert "Current home city: Lisbon." not in text and "Current home city: Porto." not in text
    # the statements themselves come in the order they were said, under their dates
    assert text.index("Porto") < text.index("Lisbon") < text.index("relocated to Vienna")


async def test_session_memories_never_leak_into_another_session_in_hybrid_recall(hybrid):
    from memory_adapters.engine.record import StoredMemory
    svc = hybrid
    await svc.store(StoredMemory(agent_id="sess", scope="session", session_id="s-1", key="draft",
                           value="The secret draft title is Blue Harbour."))
    await svc.store(StoredMemory(agent_id="sess", scope="agent", key="fact", value="I like harbour towns."))
    other = await svc.recall(RecallRequest(agent_id="sess", query="What is the draft title?",
                                           metadata={"session_id": "s-2"}))
    same = await svc.recall(RecallRequest(agent_id="sess", query="What is the draft title?",
                                          metadata={"session_id": "s-1"}))
    assert all("Blue Harbour" not in b.text for b in other)
    assert "Blue Harbour" in same[0].text


async def test_long_turns_are_split_so_a_late_fact_is_still_found(tiered):
    _, svc = tiered
    filler = " ".join(f"Sentence number {i} is about nothing in particular at all." for i in range(30))
    await svc.retain(RetainRequest(agent_id="long", entry=_entry("hist1_l", filler + " My locker code is 4471.", "2024-02-02")))
    blocks = await svc.recall(RecallRequest(agent_id="long", query="What is my locker code?"))
    assert "4471" in blocks[0].text
    piece = next(m for m in await svc.ltm.all_for("long") if "4471" in m.value)
    assert len(piece.value) <= 700  # stored as pieces of whole sentences, not one huge memory


async def test_the_assistants_ok_is_not_a_memory_and_dates_come_from_the_conversation(tiered):
    _, svc = tiered
    await svc.retain(RetainRequest(agent_id="d", entry=_entry("hist1_d", "I ran the Lisbon half marathon.", "2023-04-12")))
    mems = await svc.ltm.all_for("d")
    assert all("OK." not in m.value for m in mems)
    blocks = await svc.recall(RecallRequest(agent_id="d", query="When did I run the half marathon?"))
    assert blocks[0].ts.startswith("2023-04-12")


def test_past_twenty_thousand_vectors_the_close_ones_are_found_and_removed_ones_stay_gone():
    """The sign-bit prefilter must not lose what is actually close to the question."""
    np = pytest.importorskip("numpy")
    from memory_adapters.engine.dense import VectorIndex
    rng = np.random.default_rng(7)
    index = VectorIndex(384)
    noise = rng.standard_normal((VectorIndex.EXACT_UP_TO + 5000, 384)).astype("float32")
    for i, v in enumerate(noise / np.linalg.norm(noise, axis=1, keepdims=True)):
        index.add(f"other{i}", v)
    query = rng.standard_normal(384).astype("float32")
    query /= np.linalg.norm(query)
    for j in range(8):  # memories about the question: cosine ~0.6, as a relevant sentence is
        v = 0.6 * query + 0.8 * rng.standard_normal(384).astype("float32") / np.sqrt(384)
        index.add(f"close{j}", v / np.linalg.norm(v))
    assert {i for i, _ in index.search(query, k=8)} == {f"close{j}" for j in range(8)}
    for j in range(4):
        index.remove(f"close{j}")
    found = [i for i, _ in index.search(query, k=8)]
    assert {i for i in found if i.startswith("close")} == {f"close{j}" for j in range(4, 8)}


def test_lexical_search_after_upserts_and_removals_ranks_as_bm25_over_the_live_memories():
    """The index is kept incrementally (new rows on upsert, holes on removal); the ranking must not notice."""
    import math
    from collections import Counter

    from bench.seed import sentence
    from memory_adapters.engine.lexical import LexicalIndex, terms
    rng = random.Random(5)
    index, live = LexicalIndex(), {}
    for step in range(3000):
        doc = f"m{rng.randrange(800)}"
        if rng.random() < 0.15 and doc in live:
            index.remove(doc)
            del live[doc]
        else:  # a new memory, or an upsert of an existing one
            live[doc] = sentence(rng, rng.randint(3, 14))
            index.add(doc, live[doc])
    tfs = {d: Counter(terms(t)) for d, t in live.items()}
    avg = sum(sum(tf.values()) for tf in tfs.values()) / len(tfs)
    for _ in range(40):
        query = terms(sentence(rng, 4))
        expected = {}
        for d, tf in tfs.items():
            score = 0.0
            for t in set(query) & tf.keys():
                df = sum(1 for other in tfs.values() if t in other)
                idf = math.log(1 + (len(tfs) - df + 0.5) / (df + 0.5))
                k1, b = index.k1, index.b  # textbook BM25 with the index's own parameters
                score += idf * tf[t] * (k1 + 1) / (tf[t] + k1 * (1 - b + b * sum(tf.values()) / avg))
            if score:
                expected[d] = score
        got = index.search(query, k=10)
        best = sorted(expected.values(), reverse=True)[:10]
        assert [round(s, 9) for _, s in got] == [round(s, 9) for s in best]
        assert all(abs(expected[d] - s) < 1e-9 for d, s in got)
