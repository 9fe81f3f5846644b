"""A question about a person ranks what that person said first (engine/speakers.py): Ana's own
turns, spread over sessions, come before the other speaker's small talk that only says her name."""

from __future__ import annotations

from memory_adapters.engine import speakers
from memory_adapters.engine.index import AgentIndex, RecallQuery
from memory_adapters.engine.record import StoredMemory

START = 1_700_000_000.0


def said(i: int, text: str, session: str) -> StoredMemory:
    return StoredMemory(agent_id="a", scope="agent", key=f"episode:{i}", value=text, type="episode",
                        session_id=session, id=f"m{i:02d}", said_at=START + i * 3600, created_at=START + i * 3600)


def chat() -> AgentIndex:
    idx = AgentIndex()
    turns = []
    for week in range(6):  # six sessions: Ana tells one thing she did; Ben cheers her on by name
        turns += [(f"Ana: Hi Ben! {thing}", f"week-{week}") for thing in [
            ["I signed up for a pottery class.", "We went camping by the lake.", "I'm off swimming with the kids.",
             "I painted the sunrise from our porch.", "Started running in the mornings.",
             "Took the kids to the science museum."][week]]]
        turns += [(f"Ben: {line}, Ana!", f"week-{week}") for line in
                  ["Glad it helped", "Good to hear from you", "Have fun doing things", "Wow, so cool"]]
    for i, (text, session) in enumerate(turns):
        idx.put(said(i, text, session))
    return idx


QUESTION = "What things does Ana do in her free time?"


def test_a_question_about_a_person_ranks_her_own_turns_above_small_talk_that_names_her(monkeypatch):
    idx = chat()
    ranked = [m.value for m, _ in idx.rank(QUESTION, in_context=True)]
    assert all(v.startswith("Ana: ") for v in ranked[:6])  # all six things she did, from six sessions
    monkeypatch.setattr(speakers, "BOOST", 0.0)  # without it, her name in Ben's replies wins
    unmoved = [m.value for m, _ in idx.rank(QUESTION, in_context=True)]
    assert sum(v.startswith("Ana: ") for v in unmoved[:6]) < 6


def test_a_small_block_holds_what_she_did_across_sessions():
    block = "\n".join(p.text for p in chat().recall(RecallQuery(QUESTION, budget_tokens=100, max_blocks=2)))
    assert sum(thing in block for thing in ("pottery", "camping", "swimming", "painted", "running", "museum")) >= 5


def test_a_question_naming_both_speakers_or_neither_moves_nothing():
    idx = chat()
    both = "What did Ana and Ben talk about?"
    assert idx.speakers.named_in(both) == {"Ana", "Ben"}
    assert idx.speakers.named_in("what things does ana do?") == set()  # a name is written with a capital
    ranked = idx._ranked(both, None, 400, START, None, 400, False)
    assert idx.speakers.boosted(ranked, "What did they talk about?") == ranked


def test_only_a_capitalised_name_said_more_than_once_is_a_speaker():
    idx = AgentIndex()
    idx.put(said(0, "user: I like tea\nassistant: Noted, tea it is.", "s"))  # an agent's own turn format
    idx.put(said(1, "Note: the boiler code is 4471.", "s"))
    idx.put(said(2, "Ana: I like coffee.", "s"))
    assert idx.speakers.named_in("What does the User like? A Note? Ana?") == set()
    idx.put(said(3, "Ana: And cake.", "s"))
    assert idx.speakers.named_in("What does Ana like?") == {"Ana"}
    idx.drop("m03")
    assert idx.speakers.named_in("What does Ana like?") == set()
