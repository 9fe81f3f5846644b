"""A sitting that matches the question lifts its other turns (engine/sittings.py): the part of the
answer said a few turns after the question's topic, with a word that small talk shares too, comes
before that small talk once its sitting is known to be about the topic."""

from __future__ import annotations

from memory_adapters.engine import sittings
from memory_adapters.engine.index import AgentIndex, RecallQuery
from memory_adapters.engine.record import StoredMemory
from memory_adapters.engine.sittings import Sittings

START = 1_700_000_000.0
DAY = 86_400.0


def said(i: int, text: str, day: int, *, memory_type: str = "episode") -> StoredMemory:
    at = START + day * DAY + i * 60
    return StoredMemory(agent_id="a", scope="agent", key=f"{memory_type}:{i}", value=text, type=memory_type,
                        session_id="chat", id=f"m{i:02d}", said_at=at, created_at=at)


def chat() -> AgentIndex:
    turns = [  # one day about a hike; the marshmallows come three turns after the last word about it
        ("Ana: We finally did the long hike up to the ridge trail with the kids!", 0),
        ("Ben: A hike with the kids, nice. Was the hike hard?", 0),
        ("Ana: The hike was steep at the end but they loved the view.", 0),
        ("Ben: Did they sleep well after?", 0),
        ("Ana: Like logs. Oh and the dog got muddy.", 0),
        ("Ben: Ha, of course he did.", 0),
        ("Ana: At camp my family roasted marshmallows and told ghost stories by the fire.", 0),
        # other days: Ana's small talk that says 'family', shorter (so BM25 likes it better)
        ("Ana: My family says hi!", 1), ("Ben: Say hi back!", 1),
        ("Ana: Family dinner tonight.", 2), ("Ben: Enjoy it.", 2),
        ("Ana: Busy week, family stuff.", 3), ("Ben: Hang in there.", 3),
    ]
    idx = AgentIndex()
    assert idx.load((said(i, text, day), None) for i, (text, day) in enumerate(turns)) == len(turns)
    return idx


QUESTION = "What does Ana do with her family on hikes?"


def test_the_sitting_about_the_hike_lifts_the_turn_that_only_says_family(monkeypatch):
    idx = chat()
    lifted = [m.id for m, _ in idx.rank(QUESTION, in_context=True)]
    small_talk = ("m07", "m09", "m11")
    assert all(lifted.index("m06") < lifted.index(d) for d in small_talk)
    monkeypatch.setattr(sittings, "WEIGHT", 0.0)  # turns alone: the shorter small talk wins on 'family'
    alone = [m.id for m, _ in idx.rank(QUESTION, in_context=True)]
    assert any(alone.index(d) < alone.index("m06") for d in small_talk)
    assert set(alone) == set(lifted)  # reordered, nothing added or lost


def test_a_small_block_holds_the_marshmallows():
    block = "\n".join(p.text for p in chat().recall(RecallQuery(QUESTION, budget_tokens=90, max_blocks=1)))
    assert "marshmallows" in block


def test_a_sitting_scores_by_its_best_hits_and_a_typed_memory_is_a_sitting_of_its_own():
    idx = AgentIndex()
    for i, day in enumerate([0, 0, 0, 0, 1]):
        idx.put(said(i, f"turn {i}", day))
    idx.put(said(5, "Ana prefers tea", 0, memory_type="preference"))
    ranked = [("m00", 4.0), ("m01", 3.0), ("m02", 2.0), ("m03", 1.5), ("m04", 1.0), ("m05", 0.9)]
    got = dict(idx.sittings.lifted(ranked, weight=0.3, top=3))
    day0 = 0.1 * (4.0 + 3.0 + 2.0)  # the best three of day 0; its fourth hit adds nothing
    assert got["m03"] == 1.5 + day0 and got["m00"] == 4.0 + day0
    assert got["m04"] == 1.0 + 0.1 * 1.0  # alone on its day: a third of a full sitting's lift
    assert got["m05"] == 0.9 + 0.1 * 0.9  # a preference: its own sitting
    assert [d for d, _ in idx.sittings.lifted(ranked, weight=0.3, top=3)] == ["m00", "m01", "m02", "m03", "m04", "m05"]
    assert idx.sittings.lifted(ranked, weight=0.0) == ranked


def test_a_dropped_turn_leaves_its_sitting():
    idx = chat()
    idx.drop("m06")
    assert "m06" not in idx.sittings.of
    s = Sittings()
    s.put(said(0, "x", 0), "2023-05-08")
    s.put(said(1, "y", 0), "2023-05-08")
    s.put(said(2, "z", 1), "2023-05-09")
    assert s.of["m00"] == s.of["m01"] != s.of["m02"]


def test_questions_asked_the_same_day_do_not_lift_each_other():
    idx = AgentIndex()
    idx.put(said(0, "What is the wifi password at the cabin?", 0))  # turns that only ask
    idx.put(said(1, "Where did I park the car?", 0))
    idx.put(said(2, "The car is on level 3.", 0))
    assert set(idx.sittings.of) == {"m02"}
