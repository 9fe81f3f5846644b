"""A question about someone's character (engine/character.py): "Would Ana choose a career in a hospital?" is answered
by what Ana said about herself, and her point often goes on after the other's short reply. Such a
question's best hits bring Ana's own turns two away instead of Ben's "Wow!"; its query vector is
made without the speakers it names; every other question is ranked and packed as before."""

from __future__ import annotations

import asyncio

from memory_adapters.engine import character
from memory_adapters.engine.index import AgentIndex, RecallQuery
from memory_adapters.engine.record import StoredMemory
from memory_adapters.engine.schedule import Deadline, RecallScheduler, timely_recall

START = 1_700_000_000.0


def said(i: int, text: str, session: str) -> StoredMemory:
    return StoredMemory(agent_id="a", scope="agent", key=f"episode:{i}", value=text, type="episode",
                        session_id=session, id=f"m{i:02d}", said_at=START + i * 60, created_at=START + i * 60)


def chat() -> AgentIndex:
    turns = []
    for week in range(4):  # small talk first: Ana's turns tie with her others for a question about her
        turns += [(f"Ana: Busy week {week}, the garden needs work.", f"w{week}"), ("Ben: Same here.", f"w{week}"),
                  (f"Ana: The tomatoes are finally red in week {week}.", f"w{week}"), ("Ben: Nice.", f"w{week}")]
    turns += [("Ben: What's new with you?", "course"),
              ("Ana: Last week I started the nursing course at the hospital.", "course"),
              ("Ben: Wow, good luck!", "course"),
              ("Ana: Caring for people is what I want to do every day.", "course"),
              ("Ben: That's great.", "course")]
    idx = AgentIndex()
    for i, (text, session) in enumerate(turns):
        idx.put(said(i, text, session))
    return idx


def block(idx: AgentIndex, question: str) -> str:
    return "\n".join(p.text for p in idx.recall(RecallQuery(question, budget_tokens=40, max_blocks=1)))


def test_asking_what_she_would_do_brings_what_she_said_after_his_reply(monkeypatch):
    got = block(chat(), "Would Ana choose a career in a hospital?")
    assert "nursing course" in got and "Caring for people" in got
    assert "Wow, good luck" not in got  # the reply gave its room to her own next words
    monkeypatch.setattr(character, "asks", lambda question: False)  # packed as any other question
    before = block(chat(), "Would Ana choose a career in a hospital?")
    assert "nursing course" in before and "Wow, good luck" in before
    assert "Caring for people" not in before


def test_a_question_that_is_not_about_character_or_names_no_speaker_is_packed_as_before(monkeypatch):
    for question in ("Did Ana start the nursing course at the hospital?", "Would the hospital take a trainee?"):
        got = block(chat(), question)
        monkeypatch.setattr(character, "asks", lambda question: False)
        assert got == block(chat(), question)
        monkeypatch.undo()
    assert not chat().speakers.named_in("Would the hospital take a trainee?")


def test_the_query_vector_of_such_a_question_is_made_without_the_speakers_it_names():
    idx = chat()
    assert idx.query_text("Would Ana be considered a generous person?") == "Would be considered a generous person?"
    assert idx.query_text("What might Ana's next job be?") == "What might next job be?"
    assert idx.query_text("Would Redis suit Ana?") == "Would Redis suit ?"  # only a speaker's name goes
    assert idx.query_text("Would Redis suit us?") == "Would Redis suit us?"  # names no speaker: as asked
    assert idx.query_text("Where does Ana live?") == "Where does Ana live?"  # not about character: as asked


async def test_the_service_asks_for_that_vector_once_it_knows_who_the_speakers_are():
    asked: list[str] = []
    loop = asyncio.get_running_loop()

    class Encoder:
        def submit(self, text):
            asked.append(text)
            future = loop.create_future()
            future.set_result(f"vector of {text}")
            return future

        def expected_wait(self):
            return 0.0

    idx = chat()

    async def loading():  # an index still to load (a cold agent; the tiered store checks Redis first)
        return idx, None

    for indexes in (lambda: (idx, None), loading):
        asked.clear()
        for question in ("Would Ana choose a career in a hospital?", "When did Ana start the nursing course?"):
            await timely_recall(RecallScheduler(), Encoder(), "a", Deadline(60), indexes, RecallQuery(question))
        if indexes is loading:  # the question's own vector was asked while the index loaded
            assert asked == ["Would Ana choose a career in a hospital?", "Would choose a career in a hospital?", "When did Ana start the nursing course?"]
        else:
            assert asked == ["Would choose a career in a hospital?", "When did Ana start the nursing course?"]
