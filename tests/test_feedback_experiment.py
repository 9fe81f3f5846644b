"""Pseudo-relevance feedback, the sixteenth session's experiment (bench/quality/feedback.py, not shipped):
the words the best hits share bring up a turn that shares none with the question, and nothing the
question already said, nobody it names, and no turn that only asks feeds back."""

from __future__ import annotations

from bench.quality.feedback import expansion, fed_back
from memory_adapters.engine.lexical import LexicalIndex, terms

TURNS = {
    "t1": "Ana: I was at the climate rally downtown with my sister.",
    "t2": "Ana: The climate rally was huge, thousands came.",
    "t3": "Ana: Next weekend I volunteer for the climate campaign again.",
    "t4": "Ana: Bought new shoes for the trip.",
    "small": "Ana: Lunch was nice today.",
    "asks": "Ben: Which rally was that, the climate one?",
    "answer": "Ana: Wrote my senator about climate laws after the rally.",
}
QUESTION = "What does Ana care about most?"


def index() -> LexicalIndex:
    lexical = LexicalIndex()
    for d, text in TURNS.items():
        lexical.add(d, text)
    return lexical


def ranking() -> list[tuple[str, float]]:
    # as the engine left it: the best hits are Ana's turns about the rally; the answer ranks last
    return [("t1", 3.0), ("t2", 2.9), ("t3", 2.8), ("asks", 2.7), ("small", 2.0), ("t4", 1.9), ("answer", 1.5)]


def test_the_best_hits_words_lift_the_turn_that_shares_none_with_the_question():
    lexical = index()
    known = set(terms(f"{QUESTION} Ana"))
    moved = [d for d, _ in fed_back(ranking(), lexical, known, asking={"asks"}, weight=1.0, docs=3, n_terms=2)]
    assert moved.index("answer") < moved.index("small")
    assert sorted(moved) == sorted(d for d, _ in ranking())  # reordered, nothing added or lost


def test_the_question_its_people_one_off_words_and_questions_never_feed_back():
    lexical = index()
    known = set(terms(f"{QUESTION} Ana"))
    words = expansion(lexical, ranking(), known, asking={"asks"}, docs=4, n_terms=20)
    assert "ana" not in words and not set(words) & known
    assert "downtown" not in words  # in one memory only: says nothing about a topic
    assert "which" not in words and "climat" in words and "ralli" in words
    # a turn that only asks is no source: ranked first, its words alone do not feed back
    asked = expansion(lexical, [("asks", 9.0), ("small", 1.0)], known, asking={"asks"}, docs=1, n_terms=20)
    assert "climat" not in asked


def test_weight_zero_leaves_the_ranking_as_it_was():
    assert fed_back(ranking(), index(), set(), asking=set(), weight=0.0) == ranking()
