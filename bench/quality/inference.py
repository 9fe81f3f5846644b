"""Questions about a person's character (engine/character.py): the settings `loo --experiment inference` judges.

"Would Ana be considered a patriotic person?" — a question asking what a named person would, might
or is likely to do or be. The engine asks for its query vector without the names (capitalised
words after the first, `character.dense_text`) and lets its best `character.REACH_FOR` hits bring
the same speaker's turns two away instead of the turns beside them (`AgentIndex.own_beside`). The
settings here take each part away, move the number of hits, bring other turns instead, or strip
only the speakers the index knows (a second encoder call once the index is loaded, which the
service could not do before it asks for the vector). `loo.py` hands a setting the vector of
`dense_text(question)`, as the services ask for it; a setting that wants the question's own vector
embeds it. Nothing here knows the conversations' names or topics.
"""

from __future__ import annotations

import re

import numpy as np


def without_names(text: str, names: set[str]) -> str:
    """The question with each named speaker (and their possessive) taken out."""
    for name in sorted(names, key=len, reverse=True):
        text = re.sub(rf"\b{re.escape(name)}(?:'s|’s)?\b", " ", text)
    return " ".join(text.split())


def setting(embedder, vector: str = "capitals", packing: str | None = "own", reach_for: int | None = None):
    """A `loo` setting. `vector`: `capitals` (the engine's dense_text), `names` (only the speakers the
    index knows taken out), `question` (the question as asked). `packing`, for a question about a
    named person's character: `own` (the engine's: their turns two away), `own-after` (only the one
    after), `beside` (the turns beside, as any question), `span2` (both, two each side), None (the
    gate off: packed as any question). `reach_for`: how many of the best hits bring them."""
    from memory_adapters.engine import character
    from memory_adapters.engine.index import AgentIndex, RecallQuery

    engine_own, asks = AgentIndex.own_beside, character.asks

    def query(idx, text, dense_vector):
        if not asks(text) or vector == "capitals":
            return RecallQuery(text, vector=dense_vector)
        names = idx.speakers.named_in(text)
        said = without_names(text, names) if vector == "names" and names else text
        v = embedder.embed([said])[0]
        return RecallQuery(text, vector=(v / (np.linalg.norm(v) or 1.0)).astype(np.float32))

    def own_beside(self, m):
        if packing == "beside":
            return self.neighbours(m)
        if packing == "span2":
            return self.neighbours(m, 2)
        got = engine_own(self, m)
        if packing == "own-after":
            at = self.position(m)
            return [n for n in got if self.position(n) > at]
        return got

    changes = [(AgentIndex, "own_beside", own_beside)]
    if packing is None:
        changes.append((character, "asks", lambda text: False))  # recall's gate only: the vector is chosen above
    if reach_for is not None:
        changes.append((character, "REACH_FOR", reach_for))
    query.patch = tuple(changes)
    return query


def grid(embedder) -> dict:
    out = {"shipped: vector without capitals, own turns two away for the best 20 (default)": setting(embedder)}
    out["off: the question's vector, the turns beside for the best 10"] = setting(embedder, "question", None)
    out["vector without capitals only"] = setting(embedder, "capitals", None)
    out["own turns two away only (the question's vector)"] = setting(embedder, "question")
    out["vector without the index's speakers (a second encoder call)"] = setting(embedder, "names")
    for n in (10, 15, 30, 60):
        out[f"own turns two away for the best {n}"] = setting(embedder, reach_for=n)
    for packing in ("own-after", "beside", "span2"):
        for n in (20, 30):
            out[f"{packing} for the best {n}"] = setting(embedder, packing=packing, reach_for=n)
    return out
