"""The tiered memory service: contract endpoints and the REST operations, over both tiers.

Writes go to MongoDB first (the source of truth), then Redis; if MongoDB fails nothing is
written anywhere and the caller gets a 503. Reads for injection take the newest memories
from Redis (falling back to MongoDB when Redis is empty or down) and relevance hits from an
in-process BM25 index that is loaded from MongoDB and kept coherent across adapter
processes by a per-agent version counter in Redis.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any

from proxy.formats.base import query_from
from proxy.redact import Redactor
from proxy.telemetry import Telemetry

from ..contract import ForgetRequest, MemoryBlock, RecallRequest, RetainRequest
from .config import TieredSettings
from .extract import memories_from_entry
from .lexical import LexicalIndex, terms
from .ltm import LTMUnavailable, MongoLTM
from .model import GLOBAL_AGENT, Memory, iso
from .stm import RedisSTM

RELEVANCE_WEIGHT = 0.7
INDEX_MAX_AGE_S = 30.0


def index_text(m: Memory) -> str:
    """A memory's searchable text: its value, plus its key when a person chose it."""
    derived = m.key.split(":", 1)[0] in ("episode", "fact", "preference", "constraint")
    return m.value if derived else f"{m.key.replace('-', ' ')} {m.value}"


def estimate_tokens(text: str) -> int:
    return (len(text) + 3) // 4


@dataclass
class AgentIndex:
    memories: dict[str, Memory] = field(default_factory=dict)
    lexical: LexicalIndex = field(default_factory=LexicalIndex)
    version: int | None = None
    loaded_at: float = 0.0

    def put(self, m: Memory) -> None:
        self.memories[m.id] = m
        self.lexical.add(m.id, index_text(m))

    def drop(self, memory_id: str) -> None:
        self.memories.pop(memory_id, None)
        self.lexical.remove(memory_id)


class TieredMemory:
    def __init__(self, settings: TieredSettings, ltm: MongoLTM, stm: RedisSTM, *,
                 telemetry: Telemetry | None = None, redactor: Redactor | None = None) -> None:
        self.settings = settings
        self.ltm = ltm
        self.stm = stm
        self.telemetry = telemetry or Telemetry()
        self.redactor = redactor or Redactor()
        self._indexes: dict[str, AgentIndex] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._background: set[asyncio.Task] = set()

    # -- lifecycle --

    async def start(self, *, warm: bool = True) -> None:
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

    async def _index(self, agent_id: str) -> AgentIndex:
        idx = self._indexes.get(agent_id)
        remote = await self.stm.version(agent_id)
        stale = idx is None or (remote is not None and remote != idx.version) or \
            (remote is None and time.time() - idx.loaded_at > INDEX_MAX_AGE_S)
        if not stale:
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
            fresh = AgentIndex(version=remote, loaded_at=time.time())
            for m in loaded:
                fresh.put(m)
            self._indexes[agent_id] = fresh
            return fresh

    async def _after_write(self, agent_id: str, put: list[Memory], dropped: list[str]) -> None:
        idx = self._indexes.get(agent_id)
        version = await self.stm.bump_version(agent_id)
        if idx is None:
            return
        for m in put:
            idx.put(m)
        for mid in dropped:
            idx.drop(mid)
        if version is not None and idx.version is not None and version == idx.version + 1:
            idx.version = version
        elif version is not None:
            idx.version = None  # someone else wrote too: reload on next read

    # -- writes --

    async def store(self, m: Memory) -> tuple[Memory, bool]:
        """Upsert one memory into both tiers and enforce the LTM cap."""
        m.value, _ = self.redactor.text(m.value)
        stored, created = await self.ltm.upsert(m)
        removed = await self.ltm.enforce_cap(stored.agent_id, self.settings.ltm_max_entries)
        await self.stm.put([stored])
        if removed:
            await self.stm.remove(stored.agent_id, removed)
        await self._after_write(stored.agent_id, [stored], removed)
        return stored, created

    async def delete(self, memory_id: str) -> bool:
        m = await self.ltm.get(memory_id)
        if m is None:
            return False
        await self.ltm.delete([memory_id])
        await self.stm.remove(m.agent_id, [memory_id])
        await self._after_write(m.agent_id, [], [memory_id])
        return True

    async def retain(self, req: RetainRequest) -> str:
        entry = req.entry
        seen = await self.ltm.seen_entry(req.agent_id, entry["id"])
        if seen:
            return seen
        stored = []
        for m in memories_from_entry(req.agent_id, entry, req.metadata):
            stored.append((await self.store(m))[0])
        await self.ltm.mark_retained(req.agent_id, entry["id"])
        return "stored" if stored else "empty"

    async def forget(self, req: ForgetRequest) -> int:
        await self.ltm.tombstone(req.agent_id, req.entry_ids, req.reason)
        ids = await self.ltm.by_source(req.agent_id, req.entry_ids)
        await self.ltm.delete(ids)
        await self.stm.remove(req.agent_id, ids)
        await self._after_write(req.agent_id, [], ids)
        return len(ids)

    # -- reads --

    def _visible(self, m: Memory | None, session_id: str | None, now: float) -> bool:
        if m is None or m.expired(now):
            return False
        return m.scope != "session" or (session_id is not None and m.session_id == session_id)

    async def _recent(self, agent_id: str) -> list[Memory]:
        cached = await self.stm.newest(agent_id)
        if cached:
            return cached
        try:
            return await self.ltm.newest(agent_id, self.settings.stm_max_entries)
        except LTMUnavailable:
            return []

    async def rank(self, agent_id: str, query: str, *, session_id: str | None, top_k: int,
                   type_filter: set[str] | None = None, min_importance: float | None = None,
                   include_recent: bool = True) -> list[tuple[Memory, float]]:
        now = time.time()
        q = terms(query)
        idx = await self._index(agent_id)
        gidx = await self._index(GLOBAL_AGENT)

        def ok(m: Memory | None) -> bool:
            if not self._visible(m, session_id, now):
                return False
            if type_filter and m.type not in type_filter:
                return False
            return min_importance is None or m.importance >= min_importance

        hits: dict[str, tuple[Memory, float]] = {}
        for index in (idx, gidx):
            for mid, score in index.lexical.search(q, k=max(50, top_k * 5), allow=lambda i, ix=index: ok(ix.memories.get(i))):
                hits[mid] = (index.memories[mid], score)
        best = max((s for _, s in hits.values()), default=0.0)
        candidates = {mid: (m, s / best if best else 0.0) for mid, (m, s) in hits.items()}
        if include_recent:
            for m in await self._recent(agent_id):
                if m.id not in candidates and ok(m):
                    candidates[m.id] = (idx.memories.get(m.id, m), 0.0)
        scored = []
        for m, relevance in candidates.values():
            composite = m.composite_importance(now)
            final = RELEVANCE_WEIGHT * relevance + (1 - RELEVANCE_WEIGHT) * composite if q else composite
            # newer facts about the same thing outrank older ones: a tiny recency tie-breaker
            final += 1e-6 * math.tanh((m.said_at or m.created_at) / 1e10)
            scored.append((m, final))
        scored.sort(key=lambda pair: pair[1], reverse=True)
        return scored[:top_k]

    async def recall(self, req: RecallRequest) -> list[MemoryBlock]:
        query = req.query if req.query is not None else query_from(req.messages)
        session_id = req.metadata.get("session_id") if isinstance(req.metadata.get("session_id"), str) else None
        top_k = req.top_k or self.settings.recall_top_k
        ranked = await self.rank(req.agent_id, query, session_id=session_id, top_k=top_k)
        blocks, used, picked = [], 0, []
        for m, score in ranked:
            cost = estimate_tokens(m.value)
            if used + cost > self.settings.recall_budget_tokens:
                continue
            used += cost
            picked.append(m)
            blocks.append(MemoryBlock(text=m.value, score=round(score, 4), kind=m.type, source="tiered",
                                      ts=iso(m.said_at or m.created_at), id=m.id))
        if picked:
            self._spawn(self._bump(picked))
        return blocks

    async def _bump(self, memories: list[Memory]) -> None:
        now = time.time()
        for m in memories:
            m.access_count += 1
            m.last_accessed_at = now
        await self.ltm.bump_access([m.id for m in memories], now)

    async def health(self) -> dict[str, Any]:
        mongo = await self.ltm.ping()
        redis_ok = await self.stm.version("_health") is not None
        return {"status": "ok" if mongo else "degraded", "adapter": "tiered", "mongo": mongo, "redis": redis_ok}
