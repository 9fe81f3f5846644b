"""Coverage over repetition (engine/novelty.py): when one sitting restates the same thing turn after
turn, a turn of another day that adds something new moves up past some of the restatements, so a
block that fills from the top holds it sooner."""

from __future__ import annotations

import pytest

from memory_adapters.engine import novelty
from memory_adapters.engine.index import AgentIndex, RecallQuery
from memory_adapters.engine.record import StoredMemory

DAY = 86_400.0
REPEATS = [f"The allotment tomatoes are ripening nicely{tail}" for tail in (
    ".", " again.", " this week.", " at last.", ", truly.", " now.", " today.", ", so ripening.")]
ELSEWHERE = "Allotment tomatoes: blight took half, so runner beans went in by the north fence."


LATER = ["The allotment tomatoes are ripening nicely, my neighbour says.",
         "The allotment tomatoes are ripening nicely, all of them."]
RESTATED = [*REPEATS, *LATER]


def episode(i: int, text: str, session: str, said: float) -> StoredMemory:
    return StoredMemory(agent_id="gardener", scope="agent", key=f"episode:{i}", value=text, type="episode",
                        importance=0.5, id=f"m{i}", session_id=session, said_at=said, created_at=said)


def index() -> AgentIndex:
    idx = AgentIndex()
    start = 1.7e9
    filler = ["The bus was late.", "Coffee with my sister.", "Rain all afternoon.", "Watched a film."]
    n = 0
    chat = [text for repeat in REPEATS for text in (repeat, *filler)]  # said again and again, between chat
    for text in chat:  # one sitting
        idx.put(episode(n, text, "s1", start + n))
        n += 1
    later = [LATER[0], *filler, ELSEWHERE, *filler, LATER[1]]
    for text in later:  # a month later: said again, and once with something new
        idx.put(episode(n, text, "s2", start + 30 * DAY + n))
        n += 1
    return idx


def ranked(idx: AgentIndex) -> list[str]:
    """What recall packs from, best first (as `AgentIndex.recall` reads it)."""
    return [m.value for m, _ in idx.rank("How are the allotment tomatoes doing?", in_context=True)]


@pytest.mark.parametrize("arrays", [True, False], ids=["rows", "pairs"])
def test_the_new_turn_of_another_day_passes_the_repeats(arrays, monkeypatch):
    idx = index()
    if not arrays:  # the same over (id, score) pairs as over lexical rows
        monkeypatch.setattr(idx.facts, "enabled", False)
    got = ranked(idx)
    assert got[0] in REPEATS  # the sitting that matched best still leads
    assert any(got.index(ELSEWHERE) < got.index(r) for r in RESTATED), got[:12]

    monkeypatch.setattr(novelty, "PENALTY", 0.0)  # without it, every restatement comes first
    got = ranked(idx)
    assert all(got.index(ELSEWHERE) > got.index(r) for r in RESTATED)


def test_a_repeat_that_adds_new_terms_keeps_its_place():
    sittings, scores = [1, 1, 2], [3.0, 2.9, 1.0]
    words = [{"tomato", "ripe"}, {"tomato", "ripe", "bean", "fenc", "north"}, {"tomato"}]
    got, _ = novelty.order(sittings, scores, words.__getitem__)
    assert got == [0, 1, 2]
    got, adjusted = novelty.order(sittings, scores, [{"tomato", "ripe"}, {"tomato", "ripe"}, {"tomato"}].__getitem__)
    assert got == [0, 1, 2] and adjusted[1] == pytest.approx(2.4)  # moved down, not past a far weaker hit
    got, _ = novelty.order([1, 1, 2], [3.0, 2.9, 2.6], [{"a"}, {"a"}, {"b"}].__getitem__)
    assert got == [0, 2, 1]
    got, _ = novelty.order([-1, -1], [3.0, 2.9], [{"a"}, {"a"}].__getitem__)  # no sitting: never a repeat
    assert got == [0, 1]
