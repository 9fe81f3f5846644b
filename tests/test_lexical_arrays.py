"""The lexical index keeps each searched term's postings as arrays in step with its dicts
(`lexical.Postings`: appended on add, a row left out on remove) instead of rebuilding them after
every change. They must stay exactly what a rebuild gives — the same rows in the same order, the
same counts — so that every score, mean and tie is bit for bit what it was: random sequences of
adds, re-adds and removes, searched between them, against an index that rebuilds them all."""

from __future__ import annotations

import random

import numpy as np
import pytest

from memory_adapters.engine.lexical import LexicalIndex, Postings

WORDS = "dentist budget garden piano fence train lease puppy report flight hotel chess sister".split()


def rebuilt(lex: LexicalIndex) -> LexicalIndex:
    """`lex` with its arrays thrown away: each built again from the dicts on first use."""
    fresh = LexicalIndex(lex.k1, lex.b)
    fresh.__dict__.update(lex.__dict__)
    fresh._arrays = {}
    return fresh


def check_arrays(lex: LexicalIndex) -> None:
    assert set(lex._arrays) <= set(lex.postings)
    for term, arrays in lex._arrays.items():
        plist = lex.postings[term]
        want = Postings(plist)
        rows, counts = arrays.rows[:arrays.used], arrays.counts[:arrays.used]
        assert rows.dtype == want.rows.dtype and counts.dtype == want.counts.dtype
        assert np.array_equal(rows, want.rows) and np.array_equal(counts, want.counts), term


def same_search(lex: LexicalIndex, query: str, k: int) -> None:
    got, want = lex.top(query, k), rebuilt(lex).top(query, k)
    if want is None:
        assert got is None
        return
    assert got is not None
    assert np.array_equal(got[0], want[0]) and got[1].tobytes() == want[1].tobytes()
    assert (got[2], got[3]) == (want[2], want[3])  # the moments, bit for bit
    assert lex.search(query, k) == rebuilt(lex).search(query, k)


@pytest.mark.parametrize("seed", range(12))
def test_arrays_kept_in_step_match_a_rebuild(seed: int) -> None:
    rng = random.Random(seed)
    lex = LexicalIndex()
    live: list[str] = []
    for step in range(400):
        op = rng.random()
        if op < 0.55 or not live:
            doc = f"d{step}"
            live.append(doc)
        elif op < 0.75:
            doc = rng.choice(live)  # said again: a new row, the old one left out
        else:
            doc = live.pop(rng.randrange(len(live)))
            lex.remove(doc)
            doc = ""
        if doc:
            lex.add(doc, " ".join(rng.choices(WORDS, k=rng.randint(1, 8))))
        if step % 7 == 0:
            query = " ".join(rng.sample(WORDS, rng.randint(1, 4)))
            same_search(lex, query, rng.choice([3, 10, 50, 400]))
            check_arrays(lex)
    check_arrays(lex)
    assert lex._arrays  # searched terms were kept, not rebuilt every time
    for word in WORDS:
        same_search(lex, word, 20)


def test_arrays_handed_out_are_never_written() -> None:
    lex = LexicalIndex()
    for i in range(6):
        lex.add(f"d{i}", "garden piano")
    rows, counts = lex._postings("garden")
    before = rows.copy(), counts.copy()
    lex.remove("d2")  # before any append: the arrays have no spare room, so nothing was copied yet
    lex.add("d9", "garden")
    lex.add("d10", "garden")  # into the room the first append made
    lex.remove("d4")
    assert np.array_equal(rows, before[0]) and np.array_equal(counts, before[1])
    rows, _ = lex._postings("garden")
    assert [lex.ids[r] for r in rows.tolist()] == ["d0", "d1", "d3", "d5", "d9", "d10"]


def test_a_term_whose_last_posting_goes_is_forgotten() -> None:
    lex = LexicalIndex()
    lex.add("a", "garden")
    lex.add("b", "piano")
    assert lex.top("garden", 5) is not None
    lex.remove("a")
    assert "garden" not in lex._arrays and lex.top("garden", 5) is None
    lex.add("c", "garden")
    check_arrays(lex)
    assert lex.scored("garden", 5)[0][0][0] == "c"


def test_an_index_of_only_small_talk_answers_a_query_instead_of_failing():
    """An agent whose only memories are words the index leaves out ("Hi there, how are you?"): a
    recall finds nothing, it does not fail (it divided by the documents' total length, 0)."""
    from memory_adapters.engine.lexical import LexicalIndex
    ix = LexicalIndex()
    ix.add("a", "Hi there, how are you?")
    assert ix.top("when is my trip") is None
    assert ix.scored("how are you")[0] == []
    ix.add("b", "My trip to Lisbon starts on the 14th.")
    assert [i for i, _ in ix.scored("trip Lisbon")[0]] == ["b"]
