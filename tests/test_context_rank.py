"""Recall ranks a turn in its conversation (engine/context.py): the reply beside a question that
names the topic comes before a turn that shares a word by chance, and a question the user asked
before does not bury the memory that answers it."""

from __future__ import annotations

import random

from memory_adapters.engine import context
from memory_adapters.engine.index import AgentIndex, RecallQuery
from memory_adapters.engine.record import StoredMemory

START = 1_700_000_000.0


def said(i: int, text: str, session: str, *, memory_type: str = "episode") -> StoredMemory:
    return StoredMemory(agent_id="a", scope="agent", key=f"{memory_type}:{i}", value=text, type=memory_type,
                        session_id=session, id=f"m{i}", said_at=START + i, created_at=START + i)


def test_the_reply_beside_a_matching_question_ranks_above_a_turn_that_shares_a_word_by_chance():
    idx = AgentIndex()
    for m in [said(0, "Ana: Did the plumber finally fix the boiler?", "flat"),
              said(1, "Ben: Yes, on Tuesday he swapped the valve.", "flat"),
              said(2, "Ana: I bought new curtains.", "errands"),
              said(3, "Ben: Tuesday is the dentist.", "errands"),
              said(4, "Ana: Good luck with that.", "errands")]:
        idx.put(m)
    question = "What happened with the plumber and the boiler on Tuesday?"
    words_only = [m.id for m, _ in idx.rank(question)]
    in_context = [m.id for m, _ in idx.rank(question, in_context=True)]
    assert words_only.index("m3") < words_only.index("m1")  # by words alone the dentist turn comes first
    assert in_context.index("m1") < in_context.index("m3")  # said beside the question about the boiler, it rises
    assert set(in_context) == set(words_only)  # reordered, nothing added or lost


def test_a_question_asked_before_does_not_crowd_out_the_memory_that_answers_it():
    idx = AgentIndex()
    for i in range(3):  # the user asked the same thing in three earlier chats, and got no answer then
        idx.put(said(i, "What is the wifi password at the cabin?", f"chat-{i}"))
    idx.put(said(3, "The cabin wifi password is on the fridge, under the magnet shaped like a fish.", "trip"))
    packed = idx.recall(RecallQuery("wifi password at the cabin?", budget_tokens=30, max_blocks=1))
    assert packed and "magnet shaped like a fish" in packed[0].text
    assert not context.asks(packed[0].text)


def test_a_turn_asks_only_when_every_sentence_is_a_question():
    assert context.asks("What is the plan for Friday?")
    assert context.asks("Ana: Did you go? Was it fun?")
    assert not context.asks("Ana: Hey Ben! How was the trip?")
    assert not context.asks("We land at six. Can you pick us up?")
    assert not context.asks("")


def test_rerank_reorders_only_the_head_and_a_memory_outside_a_conversation_is_its_own_context():
    turns = [said(i, name, "s") for i, name in enumerate(["fact", "question", "chance", "reply", "tail"])]
    ranked = [(m.id, score) for m, score in zip(turns, [5.0, 4.0, 1.0, 0.9, 0.5])]
    around = {"m1": ("m3",), "m3": ("m1",), "m2": ("stranger",)}  # question and reply said together
    got = context.rerank(ranked, around, -0.5, set(), weight=0.25, depth=4)
    value = {m.id: m.value for m in turns}
    assert [(value[d], round(s, 3)) for d, s in got] == [
        ("fact", 6.25), ("question", 4.225), ("reply", 1.9), ("chance", 0.875), ("tail", 0.5)]


def test_the_neighbours_ranking_uses_stay_those_packing_shows_through_inserts_and_deletes():
    rng = random.Random(7)
    idx = AgentIndex()
    live: dict[str, StoredMemory] = {}
    for step in range(300):
        if live and rng.random() < 0.3:
            idx.drop(live.pop(rng.choice(sorted(live))).id)
            continue
        i = rng.randrange(10_000)
        m = said(i, f"turn {i}", rng.choice(["s1", "s2"]), memory_type=rng.choice(["episode", "episode", "fact"]))
        live[m.id] = m
        idx.put(m)
    assert live
    for m in idx.memories.values():
        assert idx.around.get(m.id, ()) == tuple(n.id for n in idx.neighbours(m))
