"""Contextual turn embeddings: an experiment over `loo.py`'s harness, not shipped unless it holds.

A chat turn is often elliptical ("Yes! We went there last weekend with the kids."): its meaning is
completed by the turn before it. Embedding a stored turn together with its preceding turn is the
usual first-stage answer (contextual chunk embeddings, "contextual retrieval"); the engine's context
step (context.py) reorders only the head of a ranking, so it cannot lift a turn ranked ~170th whose
own words and vector miss the question. BM25 stays on the turn's own words: only the dense vector
changes.

The previous turn is what the engine's neighbours already read at retain time: the person's part
of the turn said just before, in the same session (`AgentIndex._beside`: the assistant's kept
replies stepped over), and here also the same day (a turn days later completes nothing: a sitting,
sittings.py). A reply part keeps its own vector and is never context; a retained question keeps
its own vector (as `loo.evaluate` puts it).

Settings (`--experiment contextual`): the dense vector of "previous turn + this turn" instead of
the turn's own (`replace`); both, the mean of the two unit vectors (`mean`) or the higher cosine
of the two (`max`, a second matrix beside the index's); the previous turn cut to its first N words;
context only for a turn under K words (`--experiment contextual-short`: a second round, short turns
only: replaced or the mean, under 15/20/30 words).

    LOCOMO_DIR=../shared/datasets/locomo-dev python -m bench.quality.contextual   # retain-time encoder cost
"""

from __future__ import annotations

from datetime import datetime, timezone

import numpy as np

from memory_adapters.engine.dense import VectorIndex

from .loo import with_constants


def _day(m) -> str | None:
    return None if m.said_at is None else datetime.fromtimestamp(m.said_at, timezone.utc).date().isoformat()


def _own_words(m) -> int:
    """The turn's words without a `Name:` speaker prefix."""
    head, sep, rest = m.value.partition(": ")
    return len((rest if sep and len(head.split()) <= 3 else m.value).split())


def previous_turns(memories: list) -> list:
    """For each memory (in the order the conversation was said), the person's part said just before
    it in the same session and day, or None (a reply part, the first turn of a day)."""
    out, last = [], None
    for m in memories:
        person = m.metadata.get("origin") == "user"
        same = last is not None and last.session_id == m.session_id and _day(last) == _day(m)
        out.append(last if person and same else None)
        if person:
            last = m
    return out


def contextual_text(previous, m, words: int | None) -> str:
    """'previous turn (its first `words` words) … this turn'."""
    said = previous.value.split()
    head = " ".join(said[:words]) + (" …" if words is not None and len(said) > words else "")
    return f"{head}\n{m.value}"


class MaxVectorIndex(VectorIndex):
    """A VectorIndex whose cosine for a memory is the higher of its own vector's and its contextual
    vector's (exact search only: the dev histories are far under EXACT_UP_TO rows). `matrix[rows] @ q`
    gives the max, so fusion's exact cosines of lexical candidates read it too."""

    def __init__(self, dim: int) -> None:
        super().__init__(dim)
        self._own = np.zeros((64, dim), dtype=np.float32)
        self._ctx = np.zeros((64, dim), dtype=np.float32)
        self.context: dict[str, np.ndarray] = {}  # id → contextual vector, set before `add`

    @property
    def matrix(self):
        return _Max(self._own, self._ctx)

    @matrix.setter
    def matrix(self, value) -> None:  # the base __init__ sets it
        pass

    def add(self, doc_id: str, vec) -> None:
        if vec is None:
            return
        vec = np.asarray(vec, dtype=np.float32)
        row = self.rows.get(doc_id)
        if row is None:
            row = len(self.ids)
            if row >= self._own.shape[0]:
                self._own = np.concatenate([self._own, np.zeros_like(self._own)])
                self._ctx = np.concatenate([self._ctx, np.zeros_like(self._ctx)])
                self.dead = np.concatenate([self.dead, np.zeros_like(self.dead)])
            self.ids.append(doc_id)
            self.rows[doc_id] = row
        self._own[row] = vec
        self._ctx[row] = self.context.get(doc_id, vec)
        self.dead[row] = False

    def remove(self, doc_id: str) -> None:
        row = self.rows.pop(doc_id, None)
        if row is not None:
            self.ids[row] = None
            self._own[row] = self._ctx[row] = 0.0
            self.dead[row] = True
            self.removed += 1


class _Max:
    def __init__(self, own: np.ndarray, ctx: np.ndarray) -> None:
        self.own, self.ctx = own, ctx

    def __getitem__(self, rows) -> "_Max":
        return _Max(self.own[rows], self.ctx[rows])

    def __matmul__(self, q) -> np.ndarray:
        return np.maximum(self.own @ q, self.ctx @ q)


def grid(embedder, _convs, short: bool = False) -> dict:
    """The settings: a setting's `rebuilt(conv_name, (memories, vecs))` makes its corpus. `short`: the
    second round, context for short turns only (what the first round's settings left open)."""
    cache: dict[tuple[str, int | None], dict[int, np.ndarray]] = {}

    def context_vectors(name: str, memories: list, words: int | None) -> dict[int, np.ndarray]:
        """Position → contextual vector, for the memories that have a previous turn."""
        if (name, words) not in cache:
            prev = previous_turns(memories)
            at = [i for i, p in enumerate(prev) if p is not None]
            texts = [contextual_text(prev[i], memories[i], words) for i in at]
            cache[name, words] = dict(zip(at, embedder.embed(texts))) if at else {}
        return cache[name, words]

    def setting(how: str, words: int | None, under: int | None = None):
        def rebuilt(name: str, corpus: tuple) -> tuple:
            memories, vecs = corpus[:2]
            ctx = {i: v for i, v in context_vectors(name, memories, words).items()
                   if under is None or _own_words(memories[i]) < under}
            if how == "max":
                return memories, vecs, {memories[i].id: v for i, v in ctx.items()}
            out = vecs.copy()
            for i, v in ctx.items():
                if how == "replace":
                    out[i] = v
                else:
                    mean = vecs[i] + v
                    out[i] = mean / (np.linalg.norm(mean) or 1.0)
            return memories, out
        s = with_constants()
        s.rebuilt = rebuilt
        return s

    out = {"the turn's own vector (default)": with_constants()}
    if short:
        for how, words, under in (("replace", 32, 20), ("mean", 32, 20), ("mean", None, 20), ("replace", None, 20),
                                  ("replace", 32, 15), ("replace", 32, 30), ("mean", 32, 30)):
            said = "whole" if words is None else f"first {words} words"
            out[f"{how}, previous turn {said}, turns under {under} words only"] = setting(how, words, under)
        return out
    for how in ("replace", "mean", "max"):
        for words in (None, 32):
            out[f"{how}, previous turn {'whole' if words is None else f'first {words} words'}"] = setting(how, words)
    for words in (16, 64):
        out[f"replace, previous turn first {words} words"] = setting("replace", words)
    for under in (10, 20):
        out[f"replace, previous turn first 32 words, turns under {under} words only"] = setting("replace", 32, under)
        out[f"max, previous turn first 32 words, turns under {under} words only"] = setting("max", 32, under)
    return out


def cost(rounds: int = 5) -> None:
    """Retain-time encoder CPU per turn (this thread's, one intra-op thread, 16-text batches as the
    embedding backlog takes them), the turns' own texts against their contextual texts (the
    `contextual-short` setting chosen most: the previous turn's first 32 words, turns under 30
    words), over the dev turns; rounds interleaved so other processes' load falls on both alike."""
    import time
    from statistics import median

    from memory_adapters.engine.dense import Embedder

    from .locomo import DATASET, load
    from .loo import build
    embedder = Embedder.load()
    memories = [m for c in load(DATASET) for m in build(c, embedder)[0]]
    prev = previous_turns(memories)
    own = [m.value for m in memories]
    ctx = [contextual_text(p, m, 32) if p is not None and _own_words(m) < 30 else m.value
           for p, m in zip(prev, memories)]
    times: dict[str, list[float]] = {"own": [], "contextual": []}
    for _ in range(rounds):
        for name, texts in (("own", own), ("contextual", ctx)):
            start = time.thread_time()
            for i in range(0, len(texts), 16):
                embedder.embed(texts[i:i + 16])
            times[name].append((time.thread_time() - start) * 1000 / len(texts))
    changed = sum(a != b for a, b in zip(own, ctx))
    print(f"{len(own)} turns, {changed} with context; encoder CPU per turn, median of {rounds} rounds: "
          + ", ".join(f"{k} {median(v):.2f} ms" for k, v in times.items()))


if __name__ == "__main__":
    cost()
