"""Questions that ask for an inference about a person: an experiment, not shipped (seventeenth session).

"Would Ana be considered a patriotic person?", "What job might Ana pursue?" — a question that asks
what someone *would*, *might* or is *likely* to do or be is answered by what that person said about
themselves anywhere in the conversation ("I retook the aptitude test … serving my country"), not by
one matching passage. The speaker boost (engine/speakers.py) already puts Ana's ~200-300 turns
first; among them BM25 is flat (her name is in every one) and the order is MiniLM's. But the query
vector still holds her name, and among turns that all start `Ana: ` the name only pulls toward the
turns that talk *about* her or address her. So for such a question (a modal verb: `INFERENCE`, and
at least one speaker named) the dense side searches with the question minus the names it names:
`alone` replaces the vector, otherwise the two are mixed `share` : 1 - `share`.

Other levers for the same questions, each gated the same way: the sitting lift (sittings.py) off,
and neighbours for fewer of the best hits (more of the person's distinct turns in the block).

`python -m bench.quality.loo --experiment inference` runs the grid; nothing here knows the
conversations' names or topics.
"""

from __future__ import annotations

import re
import time

import numpy as np

INFERENCE = re.compile(r"\b(?:would|might|likely)\b", re.IGNORECASE)  # asks what someone would do or be
_POSSESSIVE = "(?:'s|’s)?"


def asks_inference(text: str) -> bool:
    return INFERENCE.search(text) is not None


def without_names(text: str, names: set[str]) -> str:
    """The question with each named person (and their possessive) taken out, spaces tidied."""
    for name in sorted(names, key=len, reverse=True):
        text = re.sub(rf"\b{re.escape(name)}{_POSSESSIVE}\b", " ", text)
    return " ".join(text.split())


_QUOTED = re.compile(r'"[^"]*"|“[^”]*”')
_CAPITAL = re.compile(r"(?<=\S)(\s+)[A-Z][\w.\-]*(?:'s|’s)?")


def without_capitals(text: str) -> str:
    """The question without its capitalised words after the first (names, as a question writes
    them), quoted titles kept: what can be done before the agent's speakers are known."""
    out, last = [], 0
    for m in _QUOTED.finditer(text):
        out += [_CAPITAL.sub(" ", text[last:m.start()]), m.group(0)]
        last = m.end()
    out.append(_CAPITAL.sub(" ", text[last:]))
    return " ".join("".join(out).split())


def reaching(idx, reach: str):
    """`around` for packing a gated question: `span2`, the two turns each side of a hit; `own2`, the
    turn each side plus the same speaker's turn two away (what they said after the other's reply)."""
    from memory_adapters.engine.index import AgentIndex

    class Around(dict):
        def get(self, memory_id, default=()):
            m = idx.memories.get(memory_id)
            if m is None:
                return default
            far = AgentIndex.neighbours(idx, m, 2)
            if reach == "span2":
                return tuple(n.id for n in far)
            near = idx.around.get(memory_id, ())
            who = idx.speakers.of.get(memory_id)
            own = tuple(n.id for n in far if n.id not in near and who and idx.speakers.of.get(n.id) == who)
            if reach == "own-only":  # only the same speaker's turns two away, not the turns beside
                return own
            if reach == "own-after":  # only the same speaker's next turn
                later = [n for n in own if idx.position(idx.memories[n]) > idx.position(m)]
                return tuple(later)
            return (*near, *own)
    return Around()


def distinct(idx, ranked, most: int):
    """As `AgentIndex.recall`: each text once, the best `most`."""
    seen: set[str] = set()
    for d, s in ranked:
        norm = idx.snippets[d].norm
        if norm not in seen:
            seen.add(norm)
            yield idx.memories[d], s
            if len(seen) >= most:
                return


def query(embedder, share: float | None, sittings_off: bool = False, neighbours: int | None = None,
          gate=asks_inference, reach: str | None = None, strip: str = "names"):
    """A `loo` setting: for a question `gate` accepts that names a speaker, the dense query is the
    question without the names (mixed `share` with the original's vector; None: the stripped one
    alone; a negative share: the original vector unchanged); `sittings_off` and `neighbours` change the
    ranking and packing of those questions only."""
    from memory_adapters.engine import packing, sittings
    from memory_adapters.engine.index import AgentIndex, RecallQuery

    engine_ranked, engine_recall = AgentIndex._ranked, AgentIndex.recall
    default_neighbours = packing.NEIGHBOURS_FOR
    state = {"on": False}

    def setting(idx, text, vector):
        names = idx.speakers.named_in(text)
        state["on"] = on = bool(names) and gate(text)
        packing.NEIGHBOURS_FOR = neighbours if on and neighbours is not None else default_neighbours
        if not on or (share is not None and share < 0):
            return RecallQuery(text, vector=vector)
        stripped = embedder.embed([without_names(text, names) if strip == "names" else without_capitals(text)])[0]
        v = stripped if share is None else share * np.asarray(vector) + (1 - share) * stripped
        v = (v / (np.linalg.norm(v) or 1.0)).astype(np.float32)
        return RecallQuery(text, vector=v)

    def ranked(self, text, vector, k, now, visible, limit, in_context):
        if not (sittings_off and state["on"]):
            return engine_ranked(self, text, vector, k, now, visible, limit, in_context)
        saved, sittings.WEIGHT = sittings.WEIGHT, 0.0
        try:
            return engine_ranked(self, text, vector, k, now, visible, limit, in_context)
        finally:
            sittings.WEIGHT = saved

    def recall(self, q, visible=None):
        if not (reach and state["on"]):
            return engine_recall(self, q, visible)
        ranked_ = self._ranked(q.text, q.vector, q.candidates, time.time(), visible, 2 * packing.MAX_HITS, True)
        wider = reaching(self, reach)
        hits = distinct(self, ranked_, packing.MAX_HITS)
        return packing.pack(hits, lambda m: [self.memories[n] for n in wider.get(m.id, ())], self.position,
                            self.snippet, budget_tokens=q.budget_tokens, max_blocks=q.max_blocks)

    setting.patch = ((AgentIndex, "_ranked", ranked), (AgentIndex, "recall", recall),
                     (packing, "NEIGHBOURS_FOR", default_neighbours))
    return setting
