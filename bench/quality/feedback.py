"""Pseudo-relevance feedback over the engine's ranking: an experiment, not shipped (sixteenth session).

A question that asks for an inference about a person ("What would Ana's political leaning likely
be?") shares no word with the turns that answer it ("a group of religious conservatives … LGBTQ
rights"); what it finds first are that person's turns about what they talk about most. The rarer
words those best hits share ("lgbtq", "rights", "support") are the topic the answer is said in, so
this scores them as a second BM25 query (RM3's expansion, without its re-weighting of the
question's own terms) and adds `WEIGHT` x that query's z-score to every hit of the ranking recall
reads, after the speaker, context and sitting steps. The question's own terms and the names of the
people it asks about are not expansion terms (they found the hits already), nor is a word only one
memory holds, nor is a turn that only asks (context.asks) a source.

`python -m bench.quality.loo --experiment feedback` patches it into `AgentIndex._ranked`. Leave-one-
conversation-out it lost on one split (bench/results/HISTORY.md, "Memory that connects", sixteenth session),
so the engine does not run it.
"""

from __future__ import annotations

import math
from collections.abc import Container, Iterable

WEIGHT = 0.25  # z units of the feedback query's BM25 score a hit gains (0: off)
DOCS = 10  # the best hits (that state something) whose words are read
TERMS = 5  # expansion terms: the highest tf-idf mass over those hits


def expansion(lexical, ranked: list[tuple[str, float]], known: set[str], asking: Container[str],
              docs: int | None = None, n_terms: int | None = None) -> list[str]:
    """The feedback query: the `n_terms` terms (not in `known`, in at least two memories) with the most
    tf-idf mass over the best `docs` hits of `ranked` that do not only ask."""
    docs = DOCS if docs is None else docs
    n_terms = TERMS if n_terms is None else n_terms
    n = len(lexical.docs)
    postings = lexical.postings
    mass: dict[str, float] = {}
    taken = 0
    for d, _ in ranked:
        if taken >= docs:
            break
        if d in asking or d not in lexical.docs:
            continue
        taken += 1
        tf = lexical.docs[d][0]
        length = sum(tf.values()) or 1
        for t, c in tf.items():
            if t in known:
                continue
            df = len(postings.get(t, ()))
            if df >= 2:
                mass[t] = mass.get(t, 0.0) + c / length * math.log(n / df)
    return sorted(mass, key=lambda t: (-mass[t], t))[:n_terms]


def fed_back(ranked: list[tuple[str, float]], lexical, known: Iterable[str], asking: Container[str],
             weight: float | None = None, docs: int | None = None, n_terms: int | None = None
             ) -> list[tuple[str, float]]:
    """`ranked` (id, score), best first, with each hit raised by `weight` x its z-score for the feedback
    query (a hit it does not match counts as BM25 0); best first again. Unchanged when weight is 0 or
    the best hits hold no term to add."""
    weight = WEIGHT if weight is None else weight
    if not weight or len(ranked) < 2:
        return ranked
    terms = expansion(lexical, ranked, set(known), asking, docs, n_terms)
    got = lexical.top(terms, len(lexical.ids)) if terms else None
    if got is None:
        return ranked
    rows, scores, mean, std = got
    if std <= 1e-12:
        return ranked
    ids = lexical.ids
    z = {ids[r]: (s - mean) / std for r, s in zip(rows.tolist(), scores.tolist())}
    floor = -mean / std
    out = [(d, s + weight * z.get(d, floor)) for d, s in ranked]
    out.sort(key=lambda p: -p[1])  # stable: equal scores keep their order
    return out


def patch(weight: float, docs: int, n_terms: int) -> tuple:
    """`loo.with_constants` changes that run feedback after the engine's own ranking steps."""
    from memory_adapters.engine.index import AgentIndex
    from memory_adapters.engine.lexical import terms

    engine_ranked = AgentIndex._ranked

    def ranked(self, text, vector, k, now, visible, limit, in_context):
        out = engine_ranked(self, text, vector, k, now, visible, limit, in_context)
        if not in_context:
            return out
        known = terms(" ".join([text, *self.speakers.named_in(text)]))
        return fed_back(out, self.lexical, known, self.asking, weight, docs, n_terms)
    return ((AgentIndex, "_ranked", ranked),)
