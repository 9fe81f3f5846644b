"""Agents asking at the same moment share the query encoder: their questions are encoded together
(fewer encoder calls than questions), each gets the vector it would have got alone, and a lone
question is encoded at once, in a call of its own (no wait for company)."""

from __future__ import annotations

import asyncio

import numpy as np

from memory_adapters.engine.dense import Embedder, QueryBatcher

QUESTIONS = [f"What did we decide about the {topic} for team {i}?" for i, topic in enumerate(
    ["hiring plan", "cloud costs", "churn analysis", "pricing change", "launch date", "support backlog",
     "security review", "office move", "travel budget", "roadmap", "vendor contract", "quarterly numbers"])]


async def test_questions_asked_at_once_are_encoded_together_with_the_vectors_each_would_get_alone():
    embedder = Embedder.load()
    alone = embedder.embed(QUESTIONS)  # one at a time would give the same rows: no cache involved here
    batcher = QueryBatcher(Embedder(embedder.encoder))  # a fresh query cache
    try:
        vectors = await asyncio.gather(*(batcher.vector(q) for q in QUESTIONS))
        assert batcher.stats["questions"] == len(QUESTIONS)
        assert batcher.stats["calls"] < len(QUESTIONS)  # shared calls, not one per question
        for got, want in zip(vectors, alone):
            assert float(np.dot(got, want)) > 0.999
    finally:
        batcher.close()


async def test_a_lone_question_is_encoded_at_once_in_its_own_call():
    embedder = Embedder.load()
    batcher = QueryBatcher(Embedder(embedder.encoder))
    try:
        await batcher.vector("Where does my sister live?")
        assert batcher.stats["calls"] == 1 and batcher.stats["questions"] == 1
        await batcher.vector("where does  my SISTER live?")  # the same question for the model: from the cache
        assert batcher.stats["calls"] == 1
    finally:
        batcher.close()
