"""Contextual turn embeddings, an experiment (bench/quality/contextual.py, not shipped): a turn's
context is the person's turn said just before it in the same session and day, past the assistant's
kept replies, never another session's or day's; and the max-of-two-vectors index scores a memory
by whichever of its vectors is closer, so it ranks as the plain index when the two are one."""

from __future__ import annotations

import numpy as np

from bench.quality.contextual import MaxVectorIndex, contextual_text, previous_turns
from memory_adapters.engine.dense import VectorIndex
from memory_adapters.engine.record import StoredMemory

DAY = 86_400.0


def turn(value: str, origin: str = "user", session: str | None = "s1", day: int = 0) -> StoredMemory:
    return StoredMemory(agent_id="a", scope="agent", key=f"episode:{value}", value=value, type="episode",
                        session_id=session, said_at=1_700_000_000.0 + day * DAY, metadata={"origin": origin})


def test_context_is_the_persons_turn_before_in_the_same_session_and_day():
    asked = turn("Ben: Have you been to the lake yet?")
    reply = turn("assistant: The lake is 40 km from town.", origin="model")
    answer = turn("Ana: Yes! We went there last weekend with the kids.")
    other_session = turn("Ana: Yes, twice.", session="s2")
    next_day = turn("Ana: Yes, again.", session="s2", day=1)
    got = previous_turns([asked, reply, answer, other_session, next_day])
    assert got == [None, None, asked, None, None]  # the reply is stepped over and gets no context
    assert contextual_text(asked, answer, 3) == "Ben: Have you …\nAna: Yes! We went there last weekend with the kids."


def test_max_index_scores_the_closer_of_a_memorys_two_vectors():
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(5, 8)).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    plain, same, ctx = VectorIndex(8), MaxVectorIndex(8), MaxVectorIndex(8)
    ctx.context = {"m0": vecs[4]}  # m0's contextual vector is the query's direction
    for i in range(4):
        for index in (plain, same, ctx):
            index.add(f"m{i}", vecs[i])
    query = vecs[4]
    assert same.scored(query, 4)[0] == plain.scored(query, 4)[0]
    best, cosine = ctx.scored(query, 4)[0][0]
    assert best == "m0" and cosine > 0.99
    ctx.remove("m0")
    assert "m0" not in [d for d, _ in ctx.scored(query, 4)[0]]
