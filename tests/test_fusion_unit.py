"""`z_fuse` in-process: a memory that stands out on either signal rises, one that stands out on
both rises most, and a ranking never depends on set order (engine/fusion.py)."""

from __future__ import annotations

import pytest

from memory_adapters.engine.fusion import Signal, z_fuse


def test_a_memory_strong_on_both_signals_beats_one_strong_on_either():
    lexical = Signal({"both": 8.0, "words": 9.0, "meaning": 1.0}, mean=2.0, std=2.0, missing=0.0)
    dense = Signal({"both": 0.8, "words": 0.2, "meaning": 0.9}, mean=0.3, std=0.2, missing=0.3)
    ranked = [doc for doc, _ in z_fuse([lexical, dense])]
    assert ranked[0] == "both"
    assert set(ranked) == {"both", "words", "meaning"}


def test_the_signal_with_the_wider_range_does_not_decide_alone():
    """Raw BM25 spans tens, cosine under one: on z-scores an unusual cosine counts as much."""
    lexical = Signal({"a": 30.0, "b": 29.0}, mean=29.5, std=10.0, missing=0.0)
    dense = Signal({"a": 0.30, "b": 0.90}, mean=0.3, std=0.1, missing=0.3)
    assert [doc for doc, _ in z_fuse([lexical, dense])][0] == "b"


def test_a_memory_a_signal_has_no_score_for_counts_as_that_signals_missing_value():
    lexical = Signal({"named": 5.0}, mean=1.0, std=2.0, missing=0.0)
    dense = Signal({"named": 0.5, "unnamed": 0.5}, mean=0.5, std=0.1, missing=0.5)
    scores = dict(z_fuse([lexical, dense]))
    assert scores["named"] == pytest.approx(2.0)
    assert scores["unnamed"] == pytest.approx(-0.5)  # no query term: BM25 0, half a deviation under the mean


def test_when_every_memory_scores_alike_a_match_is_all_a_signal_tells():
    flat = Signal({"hit": 1.0}, mean=1.0, std=0.0, missing=0.0)
    other = Signal({"miss": 0.5}, mean=0.5, std=0.0, missing=0.5)
    assert z_fuse([flat, other]) == [("hit", 1.0), ("miss", 0.0)]


def test_weights_scale_a_signal_and_ties_break_by_id_whatever_the_order_given():
    a = Signal({"y": 1.0, "x": 1.0, "z": 3.0}, mean=1.0, std=1.0, missing=0.0, weight=2.0)
    assert z_fuse([a]) == [("z", 4.0), ("x", 0.0), ("y", 0.0)]
    b = Signal({"z": 3.0, "x": 1.0, "y": 1.0}, mean=1.0, std=1.0, missing=0.0, weight=2.0)
    assert z_fuse([b]) == z_fuse([a])


def test_no_candidates_no_ranking():
    assert z_fuse([Signal({}, mean=0.0, std=1.0, missing=0.0)]) == []
