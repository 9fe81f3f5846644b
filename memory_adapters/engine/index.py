"""One agent's memories in memory, and the recall pipeline over them.

Stores load an agent's memories into an `AgentIndex` once and keep it current with `put` and
`drop`; `recall` ranks (BM25 and, when vectors are on, MiniLM; fused by z-scores) and packs
the best hits with their conversational neighbours into blocks (packing.py).
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Container, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Any, overload

import numpy as np

from memplane_core.contract import DEFAULT_BUDGET_TOKENS, DEFAULT_MAX_BLOCKS
from memplane_core.tokens import estimate_tokens

from . import character, context, expansion, novelty, schedule
from .dates import indexed
from .expansion import Vocabulary
from .fused import RowLinks, fused, fused_rows
from .heap import HEAP
from .lexical import LexicalIndex, terms
from .packing import MAX_HITS, Packed, Snippet, memory_line, pack, past_marked, said_time, snippet_of
from .project_scope import memory_project
from .record import StoredMemory, a_reply, bounded, is_pinned, iso, origin_attr, writer_attr
from .rowfacts import RowFacts, best_first
from .sittings import Sittings, lift
from .speakers import Speakers

CANDIDATES = 400  # per signal; the fused ranking is over their union
NEIGHBOURS = 1  # turns on each side of a hit that come with it
IMPORTANCE_Z = 0.5  # REST search: how far importance 0 or 1 moves a memory, in standard deviations
ANY_PROJECT = "\0any"  # a `Visible` that hides no project's memories (REST search, the inspector)
IMPUTE_DENSE = 0.5  # a memory not embedded yet: its dense z taken as this share of its lexical z
MAX_SKIP = 8  # replies stepped over, on each side, looking for a turn's neighbour



def index_text(m: StoredMemory) -> str:
    """A memory's searchable text: its value, plus its key when a person chose it."""
    derived = m.key.split(":", 1)[0] in ("episode", "fact", "preference", "constraint")
    text = m.value if derived else f"{m.key.replace('-', ' ')} {m.value}"
    return f"{text} {indexed(m.metadata)}" if m.type == "episode" and "dates" in m.metadata else text


def _order_key(m: StoredMemory) -> tuple[float, float, str]:
    """When it was said, then when it was logged (turns of one dated session share a stamp)."""
    return (m.said_at or m.created_at, m.created_at, m.key)


@dataclass(frozen=True, slots=True)
class Visible:
    """What a recall or search in `session_id` may see at `now`: nothing expired (a neighbour
    included), and session-scoped memories only in their own session. Only a memory with an
    expiry or a session scope can be hidden (`AgentIndex.conditional`): ranking asks about those
    alone, and never looks the other candidates up (on a cold cache each lookup is a miss)."""

    session_id: str | None
    now: float
    project: str | None = ANY_PROJECT  # a recall's project: memories of another project are hidden

    def __call__(self, m: StoredMemory) -> bool:
        if m.expired(self.now):
            return False
        if self.project != ANY_PROJECT:
            own = memory_project(m)
            if own is not None and own != self.project:
                return False
        return m.scope != "session" or (self.session_id is not None and m.session_id == self.session_id)


def visible_in(session_id: str | None, now: float, project: str | None = ANY_PROJECT) -> Visible:
    """`project`: a recall's `metadata.project` (None: it names none, so it sees no project's
    memories); left out (REST search, the inspector), every project's."""
    return Visible(session_id, now, project)


@dataclass
class RecallQuery:
    text: str
    budget_tokens: int = DEFAULT_BUDGET_TOKENS
    max_blocks: int = DEFAULT_MAX_BLOCKS
    session_id: str | None = None
    vector: Any = None  # the query's embedding, when vectors are on
    candidates: int = CANDIDATES  # per signal: fewer when the deadline is near
    past: frozenset[str] = frozenset()  # episodes stating what has since changed: shown marked (curator/recall.py)


class RecallAnswer(list):
    """A recall's packed blocks, and which ranking answered (`dense+lexical`, `lexical: deadline`,
    …: engine/schedule.py), which the HTTP face adds to the answer as `ranking`."""

    def __init__(self, items: Any = (), ranking: str | None = None) -> None:
        super().__init__(items)
        self.ranking = ranking

    @property
    def degraded(self) -> str | None:
        """Why this answer is less than the usual ranking (`lexical`, `shed`, `loading`), or None."""
        return schedule.degraded(self.ranking)


@dataclass
class AgentIndex:
    """Lexical and (optional) dense indexes plus the time order that gives each turn its neighbours."""

    vectors: Any = None  # dense.VectorIndex when embeddings are on
    memories: dict[str, StoredMemory] = field(default_factory=dict)
    lexical: LexicalIndex = field(default_factory=LexicalIndex)
    order: list[tuple[float, float, str, str]] = field(default_factory=list)  # (when, key, id) in time order
    entries: dict[str, tuple[float, float, str, str]] = field(default_factory=dict)  # id → its entry in `order`
    snippets: dict[str, Snippet] = field(default_factory=dict)  # id → what packing shows of it
    pinned: set[str] = field(default_factory=set)  # ids an operator pinned (recalled first, pins.py)
    around: dict[str, tuple[str, ...]] = field(default_factory=dict)  # episode id → its neighbours' ids (span 1)
    asking: set[str] = field(default_factory=set)  # episodes that only ask (context.asks)
    replies: set[str] = field(default_factory=set)  # an assistant's replies kept beside turns (record.a_reply)
    conditional: set[str] = field(default_factory=set)  # ids a `Visible` may hide: expiring, session- or project-scoped
    speakers: Speakers = field(default_factory=Speakers)  # who said each `Name: text` turn (speakers.py)
    sittings: Sittings = field(default_factory=Sittings)  # the session and day each episode was said in (sittings.py)
    links: RowLinks = field(default_factory=RowLinks)  # lexical row ↔ vector row of each memory (fused.py)
    vocabulary: Vocabulary = field(default_factory=Vocabulary)  # its terms the word table knows (expansion.py)
    facts: RowFacts = field(init=False)  # what recall's in-context steps read, by lexical row

    def __post_init__(self) -> None:
        self.facts = RowFacts(self.lexical.ids)

    def __len__(self) -> int:
        return len(self.memories)

    def put(self, m: StoredMemory, vector: Any = None) -> None:
        HEAP.indexed()  # long-lived objects: out of the full collections' way (heap.py)
        self.drop(m.id)
        self.memories[m.id] = m
        if is_pinned(m):
            self.pinned.add(m.id)
        if m.expires_at is not None or m.scope == "session" or memory_project(m) is not None:
            self.conditional.add(m.id)
        self.snippets[m.id] = sn = snippet_of(m)
        self.lexical.add(m.id, index_text(m))
        self.vocabulary.saw(self.lexical.docs[m.id][0], expansion.loaded())
        if m.type == "episode":
            asks = context.asks(m.value)
            if asks:
                self.asking.add(m.id)
            if a_reply(m):  # the model's words beside a turn: no turn of the conversation (record.a_reply)
                self.replies.add(m.id)
            self.speakers.put(m.id, m.value)
            self.sittings.put(m, sn.day, asks or m.id in self.replies)
        self.facts.put(self.lexical.docs[m.id][1], m.id, conditional=m.id in self.conditional,
                       sitting=self.sittings.of.get(m.id), speaker=self.speakers.of.get(m.id), norm=sn.norm,
                       asks=m.id in self.asking)
        at = (*_order_key(m), m.id)
        i = bisect.bisect_left(self.order, at)
        self.order.insert(i, at)
        self.entries[m.id] = at
        self._relink(i)
        if vector is not None:
            self.add_vector(m.id, vector)

    def load(self, rows: Any, on_bad_row: Any = None) -> int:
        """Index rows read from a store, `(memory, vector or None)`; a row that cannot be indexed
        is left out and reported to `on_bad_row(memory_id, error)`, never failing the agent's
        index (one bad row, say a global memory, would otherwise break every agent's recall).
        Returns how many were indexed."""
        count = 0
        for m, vector in rows:
            try:
                self.put(m, vector)
                count += 1
            except Exception as exc:  # noqa: BLE001 - whatever the row holds, the others load
                try:
                    self.drop(m.id)
                except Exception:  # noqa: BLE001 - half indexed and unremovable: rebuilt on the next load
                    pass
                if on_bad_row is not None:
                    on_bad_row(str(getattr(m, "id", "?")), f"{type(exc).__name__}: {exc}"[:300])
        return count

    async def load_stepwise(self, rows: Any, on_bad_row: Any = None, step: int = 100) -> int:
        """`load`, `step` rows at a time with a yield to the event loop between: a cold agent's load
        never holds other agents' recalls for long."""
        import asyncio
        from itertools import islice

        rows, count = iter(rows), 0
        while chunk := list(islice(rows, step)):
            count += self.load(chunk, on_bad_row)
            await asyncio.sleep(0)
        return count

    def add_vector(self, memory_id: str, vector: Any) -> None:
        if self.vectors is not None and memory_id in self.memories:
            self.vectors.add(memory_id, vector)
            row = self.vectors.rows.get(memory_id)
            if row is not None:
                self.links.link(self.lexical.docs[memory_id][1], row)

    def drop(self, memory_id: str) -> StoredMemory | None:
        m = self.memories.pop(memory_id, None)
        if m is None:
            return None
        doc, sn = self.lexical.docs.get(memory_id), self.snippets.get(memory_id)
        if doc is not None:
            self.facts.drop(doc[1], sn.norm if sn is not None else "")
        self.snippets.pop(memory_id, None)
        self.pinned.discard(memory_id)
        self.asking.discard(memory_id)
        self.replies.discard(memory_id)
        self.speakers.drop(memory_id)
        self.sittings.drop(memory_id)
        self.conditional.discard(memory_id)
        self.around.pop(memory_id, None)
        self.lexical.remove(memory_id)
        if self.vectors is not None:
            self.vectors.remove(memory_id)
        at = self.entries.pop(memory_id, None)
        if at is not None:
            i = bisect.bisect_left(self.order, at)
            del self.order[i]
            self._relink(i)
        return m

    def _relink(self, i: int) -> None:
        """Refresh `around` for the turns at and beside position `i` of `order` (one changed there):
        the nearest turn on each side, past the replies between (`_beside` steps over them)."""
        size, replies = len(self.order), self.replies
        todo = [i] if i < size else []
        for step in (-1, 1):
            j, skipped = i + step, 0
            while 0 <= j < size:
                todo.append(j)
                if self.order[j][3] not in replies or skipped >= MAX_SKIP:
                    break
                j, skipped = j + step, skipped + 1
        for j in sorted(todo):
            m = self.memories.get(self.order[j][3])
            if m is not None:
                self.around[m.id] = near = tuple(n.id for n in self._beside(j, m, 1))
                docs = self.lexical.docs
                self.facts.link(docs[m.id][1], [docs[n][1] for n in near])

    def snippet(self, m: StoredMemory) -> Snippet:
        got = self.snippets.get(m.id)
        return got if got is not None else snippet_of(m)

    def position(self, m: StoredMemory) -> int:
        """Where an indexed memory stands in time order."""
        return bisect.bisect_left(self.order, self.entries[m.id])

    def neighbours(self, m: StoredMemory, span: int = NEIGHBOURS) -> list[StoredMemory]:
        """Episodes said just before and after `m` in the same session (when sessions are known)."""
        return self._beside(self.position(m), m, span) if m.type == "episode" else []

    def query_text(self, question: str) -> str:
        """What a recall's query vector is made of (character.dense_text: for a question about a
        speaker's character, the question without their names)."""
        if not character.asks(question):
            return question
        return character.dense_text(question, self.speakers.named_in(question))

    def own_beside(self, m: StoredMemory) -> list[StoredMemory]:
        """The turns two away from `m` that its own speaker said (what they said before and after the
        other's reply: character.py); none when no speaker is known."""
        who = self.speakers.of.get(m.id)
        if who is None:
            return []
        beside, of = self.around.get(m.id, ()), self.speakers.of
        return [n for n in self.neighbours(m, 2) if n.id not in beside and of.get(n.id) == who]

    def _beside(self, i: int, m: StoredMemory, span: int) -> list[StoredMemory]:
        """The episodes within `span` of position `i` of `order` (where `m` stands) in `m`'s session,
        nearest first, before then after; none for a memory that is not an episode. The assistant's
        replies kept beside turns (`replies`) are stepped over and have none: the conversation is
        the person's turns, so a reply neither stands between two of them nor brings them (a
        question that matches only a reply's words does not bring the person's memory)."""
        if m.type != "episode" or m.id in self.replies:
            return []
        out, order, replies = [], self.order, self.replies
        for step in (-1, 1):
            j, found, skipped = i + step, 0, 0
            while found < span and 0 <= j < len(order):
                other_id = order[j][3]
                j += step
                if other_id in replies:
                    skipped += 1
                    if skipped > MAX_SKIP:
                        break
                    continue
                found += 1
                other = self.memories.get(other_id)
                if other is not None and other.type == "episode" and other.session_id == m.session_id:
                    out.append(other)
        return out

    def rank(self, text: str, vector: Any = None, k: int = CANDIDATES, now: float | None = None,
             visible: Any = None, limit: int | None = None, in_context: bool = False
             ) -> list[tuple[StoredMemory, float]]:
        """Memories by fused z-score, best first (the best `limit` when given); expired ones and
        those `visible` refuses left out. `in_context`: as recall ranks — the head reordered with
        each turn's neighbours (context.py), then every hit lifted by its sitting (sittings.py)."""
        memories = self.memories
        return [(memories[d], s) for d, s in self._ranked(text, vector, k, now or time.time(), visible, limit,
                                                          in_context)]

    def _ranked(self, text: str, vector: Any, k: int, now: float, visible: Any, limit: int | None,
                in_context: bool) -> Sequence[tuple[str, float]]:
        """`rank` by id: a caller that reads the best few never looks the rest up. In context, with
        no filter but a `Visible`: as `RankedRows`, over arrays (the same pairs)."""
        if in_context and self.facts.enabled and (visible is None or isinstance(visible, Visible)):
            return self._expanded(self._in_context(text, vector, k, now, visible, limit), text, vector)
        ranked, signals = fused(self.lexical, self.vectors, self.links, text, vector, k, IMPUTE_DENSE, limit)
        out = list(islice(self._shown(ranked, now, visible), limit))
        if in_context:  # over what this recall may see: a hidden neighbour counts as no evidence
            out = self.sittings.lifted(context.rerank(self.speakers.boosted(out, text), self.around,
                                                      sum(s.floor() for s in signals), self.asking))
            out = self._expanded(novelty.diversified(out, self.sittings.of, self.lexical.docs), text, vector)
        return out

    def expansion_terms(self, text: str, vector: Any) -> list[str]:
        """The words recall adds to `text` as a second BM25 query (expansion.py): none without the
        question's vector, with expansion off, or when the word table cannot be read."""
        if vector is None or not expansion.WEIGHT:
            return []
        try:
            words = expansion.table()
        except Exception:  # noqa: BLE001 - an unreadable word table turns expansion off, never recall
            return []
        known = set(terms(" ".join([text, *self.speakers.named_in(text)])))
        return self.vocabulary.nearest(vector, self.lexical.postings, len(self.lexical.docs), known, words)

    def _expanded(self, ranked: Any, text: str, vector: Any) -> Any:
        """`ranked` (in context, best first) with each hit raised by expansion.WEIGHT x its z-score for
        the expansion query, best first again (stable: equal scores keep their order)."""
        z = expansion.z_of_rows(self.lexical, self.expansion_terms(text, vector)) if len(ranked) else None
        if z is None:
            return ranked
        if isinstance(ranked, RankedRows):
            scores = ranked.scores + expansion.WEIGHT * z[ranked.rows]
            order = np.argsort(-scores, kind="stable")
            return RankedRows(ranked.rows[order], scores[order], self.lexical.ids, self.facts)
        docs = self.lexical.docs
        out = [(d, s + expansion.WEIGHT * float(z[docs[d][1]])) for d, s in ranked]
        out.sort(key=lambda pair: -pair[1])  # stable
        return out

    def _in_context(self, text: str, vector: Any, k: int, now: float, visible: Any, limit: int | None
                    ) -> "RankedRows":
        """`_ranked` in context over the candidates' lexical rows (rowfacts.py): the same steps
        (`_shown`, speakers, context, sittings) as array operations, no per-candidate Python."""
        keys, scores, signals = fused_rows(self.lexical, self.vectors, self.links, text, vector, k, IMPUTE_DENSE)
        facts = self.facts
        if len(keys):
            shown = facts.live[keys]
            maybe = np.flatnonzero(shown & facts.conditional[keys])  # expiring or scoped: asked one by one
            if len(maybe):
                ids, memories = self.lexical.ids, self.memories
                for i, r in zip(maybe.tolist(), keys[maybe].tolist()):
                    m = memories[ids[r]]
                    shown[i] = not (m.expired(now) or (visible is not None and not visible(m)))
            if not shown.all():
                keys, scores = keys[shown], scores[shown]
        order = best_first(keys, scores, facts, limit)
        rows, scores = keys[order], scores[order]
        rows, scores = self.speakers.boosted_rows(rows, scores, text, facts.speaker, facts.speakers_named)
        rows, scores = context.rerank_rows(rows, scores, facts, sum(s.floor() for s in signals))
        order, scores = lift(facts.sitting[rows], scores)
        rows, scores = novelty.diversified_rows(rows[order], scores, facts.sitting, self.lexical.ids,
                                                self.lexical.docs)
        return RankedRows(rows, scores, self.lexical.ids, facts)

    def _may_hide(self, visible: Any) -> Container[str]:
        """The memories `visible` could refuse: a `Visible` only those in `conditional`, any other
        filter every one."""
        return self.conditional if isinstance(visible, Visible) else self.memories

    def _shown(self, fused: list[tuple[str, float]], now: float, visible: Any) -> Iterator[tuple[str, float]]:
        """Lazily, the fused hits that are indexed, unexpired and `visible`; a memory a `Visible`
        cannot hide (most) is not looked up."""
        memories = self.memories
        maybe_hidden = self.conditional if visible is None else self._may_hide(visible)  # expired, or hidden
        for pair in fused:
            if pair[0] in maybe_hidden:
                m = memories[pair[0]]
                if m.expired(now) or (visible is not None and not visible(m)):
                    continue
            elif pair[0] not in memories:
                continue
            yield pair

    def search(self, text: str, vector: Any = None, *, top_k: int, visible: Any = None,
               type_filter: set[str] | None = None, min_importance: float | None = None
               ) -> list[tuple[StoredMemory, float]]:
        """The REST API's search: memories by fused relevance, filtered by type and importance,
        each text once (unlike recall: no neighbours, no packing — a person reads these).

        Importance, which a person set, moves a memory by up to ±IMPORTANCE_Z standard deviations:
        enough to order near-equals, too little to lift an unrelated memory over a match."""
        ranked = [(m, score + 2 * IMPORTANCE_Z * (m.importance - 0.5)) for m, score in self.rank(text, vector,
                                                                                                   visible=visible)]
        ranked.sort(key=lambda pair: pair[1], reverse=True)
        out: list[tuple[StoredMemory, float]] = []
        seen: set[str] = set()
        for m, score in ranked:
            if type_filter and m.type not in type_filter:
                continue
            if min_importance is not None and m.importance < min_importance:
                continue
            norm = self.snippet(m).norm
            if norm in seen:
                continue
            seen.add(norm)
            out.append((m, score))
            if len(out) >= top_k:
                break
        return out

    def recall(self, q: RecallQuery, visible: Any = None) -> list[Packed]:
        ranked = self._ranked(q.text, q.vector, q.candidates, time.time(), visible, 2 * MAX_HITS, in_context=True)
        memories, around, snippets = self.memories, self.around, self.snippets

        def distinct() -> Iterator[tuple[StoredMemory, float]]:
            if isinstance(ranked, RankedRows):
                return ((memories[d], s) for d, s in ranked.distinct(MAX_HITS))
            return distinct_pairs()

        def distinct_pairs() -> Iterator[tuple[StoredMemory, float]]:
            """A user who repeats small talk should not fill the block; taken as packing needs them."""
            seen: set[str] = set()
            for d, s in ranked:
                norm = snippets[d].norm
                if norm not in seen:
                    seen.add(norm)
                    yield memories[d], s
                    if len(seen) >= MAX_HITS:
                        return

        maybe_hidden = None if visible is None else self._may_hide(visible)

        def seen(ms: Iterable[StoredMemory]) -> list[StoredMemory]:  # those this recall may see
            return [n for n in ms if maybe_hidden is None or n.id not in maybe_hidden or visible(n)]

        def near(m: StoredMemory) -> list[StoredMemory]:  # neighbours(m), kept as turns are put and dropped
            return seen(map(memories.__getitem__, around.get(m.id, ())))

        def own(m: StoredMemory) -> list[StoredMemory]:  # own_beside(m), as recall may see them
            return seen(self.own_beside(m))

        about_character = character.asks(q.text) and bool(self.speakers.named_in(q.text))
        snippet = self.snippet if not q.past else past_marked(self.snippet, q.past)
        return pack(distinct(), own if about_character else near, self.position, snippet,
                    budget_tokens=q.budget_tokens, max_blocks=q.max_blocks,
                    neighbours_for=character.REACH_FOR if about_character else None)


class RankedRows(Sequence):
    """A ranking as lexical rows and scores, best first; read as `(memory id, score)` pairs."""

    def __init__(self, rows: np.ndarray, scores: np.ndarray, ids: list, facts: RowFacts) -> None:
        self.rows, self.scores, self._ids, self._facts = rows, scores, ids, facts

    def __len__(self) -> int:
        return len(self.rows)

    @overload
    def __getitem__(self, i: int) -> tuple[str, float]: ...
    @overload
    def __getitem__(self, i: slice) -> list[tuple[str, float]]: ...

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return list(zip(map(self._ids.__getitem__, self.rows[i].tolist()), self.scores[i].tolist()))
        return self._ids[int(self.rows[i])], float(self.scores[i])

    def __iter__(self) -> Iterator[tuple[str, float]]:
        return zip(map(self._ids.__getitem__, self.rows.tolist()), self.scores.tolist())

    def __eq__(self, other: object) -> bool:
        return list(self) == (list(other) if isinstance(other, Sequence) else other)

    def distinct(self, most: int) -> list[tuple[str, float]]:
        """The first hit of each text said (`Snippet.norm`), at most `most`, best first: a user who
        repeats small talk should not fill the block."""
        _, first = np.unique(self._facts.norm[self.rows], return_index=True)
        first.sort()
        first = first[:most]
        return list(zip(map(self._ids.__getitem__, self.rows[first].tolist()), self.scores[first].tolist()))


SHARED_FIRST = 2  # global memories that may lead a recall: few, and they bind every agent


def recall_with_shared(own: AgentIndex, shared: AgentIndex | None, q: RecallQuery,
                       visible: Any = None) -> list[Packed]:
    """The best matching shared (global) memories first, then the agent's own packed into what is left
    of the budget and the block count."""
    first: list[Packed] = []
    later: list[Packed] = []  # shared memories a model or a tool wrote: after the agent's own, never leading
    if shared is not None and len(shared):
        for m, score in shared.rank(q.text, q.vector, k=q.candidates, visible=visible, limit=SHARED_FIRST):
            if score > 0 and len(first) + len(later) < q.max_blocks:
                (later if bounded(m) else first).append(
                    Packed(text=memory_line(m), score=round(score, 4), kind=m.type, ts=iso(said_time(m)), id=m.id,
                           memory_ids=[m.id], origin=origin_attr([m]), writer=writer_attr([m]), bounded=bounded(m)))
    blocks_left = q.max_blocks - len(first) - len(later)
    if blocks_left <= 0:
        return first + later
    rest = replace(q, budget_tokens=q.budget_tokens - sum(estimate_tokens(p.text) for p in first + later),
                   max_blocks=blocks_left)
    return first + own.recall(rest, visible=visible) + later
