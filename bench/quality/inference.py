"""Questions about a person's character (engine/character.py): the settings `loo --experiment inference` judges.

"Would Ana be considered a patriotic person?" — a question asking what a named person would, might
or is likely to do or be. The engine asks for its query vector without the speakers it names
(`AgentIndex.query_text`) and lets its best `character.REACH_FOR` hits bring the same speaker's
turns two away instead of the turns beside them (`AgentIndex.own_beside`). The settings here take
each part away, move the number of hits, bring other turns instead, or strip every capitalised word
after the first (what could be done before the index is known, without a second encoder call; it
would also take "Redis" out of "Would Redis suit us?"); and two candidates that did not hold up, on
top of it or of the setting off: the best few hits of each sitting first (`spread`), and a sitting's
turns of one speaker pooled into a unit of its own (`units`). `loo.py` hands a setting the vector of
`query_text(question)`, as the services ask for it; a setting that wants another embeds it.
Nothing here knows the conversations' names or topics.
"""

from __future__ import annotations

import re

import numpy as np


_QUOTED = re.compile(r'"[^"]*"|“[^”]*”')
_CAPITAL = re.compile(r"(?<=\S)(\s+)[A-Z][\w.\-]*(?:'s|’s)?")


def without_capitals(text: str) -> str:
    """The question without its capitalised words after the first, quoted titles kept."""
    out, last = [], 0
    for m in _QUOTED.finditer(text):
        out += [_CAPITAL.sub(" ", text[last:m.start()]), m.group(0)]
        last = m.end()
    out.append(_CAPITAL.sub(" ", text[last:]))
    return " ".join("".join(out).split())


def setting(embedder, vector: str = "speakers", packing: str | None = "own", reach_for: int | None = None):
    """A `loo` setting. `vector`: `speakers` (the engine's: the speakers it names taken out),
    `capitals` (every capitalised word after the first), `question` (as asked). `packing`, for a
    question about a named person's character: `own` (the engine's: their turns two away),
    `own-after` (only the one after), `beside` (the turns beside, as any question), `span2` (both,
    two each side), None (the gate off: packed as any question). `reach_for`: how many of the best hits bring them."""
    from memory_adapters.engine import character
    from memory_adapters.engine.index import AgentIndex, RecallQuery

    engine_own, asks = AgentIndex.own_beside, character.asks

    def query(idx, text, dense_vector):
        if not asks(text) or vector == "speakers":
            return RecallQuery(text, vector=dense_vector)
        v = embedder.embed([without_capitals(text) if vector == "capitals" else text])[0]
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
    out = {"shipped: vector without the speakers, own turns two away for the best 20 (default)": setting(embedder)}
    out["off: the question's vector, the turns beside for the best 10"] = setting(embedder, "question", None)
    out["vector without the speakers only"] = setting(embedder, "speakers", None)
    out["own turns two away only (the question's vector)"] = setting(embedder, "question")
    out["vector without any capitalised word after the first"] = setting(embedder, "capitals")
    for n in (10, 15, 30, 60):
        out[f"own turns two away for the best {n}"] = setting(embedder, reach_for=n)
    for packing in ("own-after", "beside", "span2"):
        for n in (20, 30):
            out[f"{packing} for the best {n}"] = setting(embedder, packing=packing, reach_for=n)
    for per in (1, 2, 3):
        for n in (None, 0):
            out[f"+ the best {per} of each sitting first" + (", no own turns" if n == 0 else "")] = spread(
                embedder, per, n)
    for weight in (0.25, 0.5, 1.0, 2.0):
        out[f"+ a sitting's turns of one speaker as a unit, weight {weight}"] = units(embedder, weight)
    for per in (1, 2, 3):
        out[f"off + the best {per} of each sitting first"] = spread(embedder, per, shipped=False)
    for weight in (0.5, 1.0, 2.0):
        out[f"off + a sitting's turns of one speaker as a unit, weight {weight}"] = units(embedder, weight,
                                                                                           shipped=False)
    return out


def spread(embedder, per: int, reach_for: int | None = None, shipped: bool = True):
    """On top of the shipped setting, for a question about a named person's character: the ranking's
    hits that are among the best `per` of their sitting first (their order kept), the rest after —
    more of the person's sittings in the block, fewer turns of each (`reach_for`: hits bringing own
    turns; 0: none). Not `shipped`: on top of the setting off instead."""
    from memory_adapters.engine import character
    from memory_adapters.engine.index import AgentIndex

    base = setting(embedder, reach_for=reach_for) if shipped else setting(embedder, "question", None)
    engine_ranked, asks = AgentIndex._ranked, character.asks

    def ranked(self, text, vector, k, now, visible, limit, in_context):
        out = engine_ranked(self, text, vector, k, now, visible, limit, in_context)
        if not (in_context and asks(text) and self.speakers.named_in(text)):
            return out
        seen: dict = {}
        first, rest = [], []
        for pair in out:
            s = self.sittings.of.get(pair[0], pair[0])
            seen[s] = seen.get(s, 0) + 1
            (first if seen[s] <= per else rest).append(pair)
        return first + rest
    base.patch = (*base.patch, (AgentIndex, "_ranked", ranked))
    return base


def units(embedder, weight: float, reach_for: int | None = None, shipped: bool = True):
    """On top of the shipped setting, for a question about a named person's character: each sitting's
    turns of one speaker pooled into one unit (the mean of their vectors); every turn gains `weight` x
    its unit's z-score (cosine with the query vector, over all units). Not `shipped`: on top of the
    setting off instead."""
    from memory_adapters.engine import character
    from memory_adapters.engine.index import AgentIndex

    base = setting(embedder, reach_for=reach_for) if shipped else setting(embedder, "question", None)
    engine_ranked, asks = AgentIndex._ranked, character.asks

    def ranked(self, text, vector, k, now, visible, limit, in_context):
        out = engine_ranked(self, text, vector, k, now, visible, limit, in_context)
        if not (in_context and vector is not None and asks(text) and self.speakers.named_in(text)):
            return out
        unit_of, rows = {}, {}
        for d, row in self.vectors.rows.items():
            key = (self.sittings.of.get(d), self.speakers.of.get(d))
            if key[0] is not None and key[1] is not None:
                unit_of[d] = key
                rows.setdefault(key, []).append(row)
        keys = list(rows)
        means = np.stack([self.vectors.matrix[rows[key]].mean(0) for key in keys])
        means /= np.linalg.norm(means, axis=1, keepdims=True) + 1e-12
        cos = means @ np.asarray(vector, dtype=np.float32)
        z = dict(zip(keys, ((cos - cos.mean()) / (cos.std() or 1.0)).tolist()))
        lifted = [(d, s + weight * z.get(unit_of.get(d), 0.0)) for d, s in out]
        lifted.sort(key=lambda p: -p[1])
        return lifted
    base.patch = (*base.patch, (AgentIndex, "_ranked", ranked))
    return base
