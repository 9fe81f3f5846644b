"""The tiered memory service: contract endpoints and the REST operations, over both tiers.

Writes go to MongoDB first (the source of truth), then Redis (the newest memories per agent
and a version counter); if MongoDB fails nothing is written anywhere and the caller gets a 503.
Recall and search run the engine (memory_adapters/engine) over an in-process index that is
loaded from MongoDB and kept coherent across adapter processes by the per-agent version in Redis.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from memplane_core.contract import (
    DEFAULT_MAX_BLOCKS,
    ForgetRequest,
    RecalledMemory,
    RecallRequest,
    RetainRequest,
)
from memplane_core.provenance import wire_bounded
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry
from memplane_core.turn_text import query_from

from ..engine.curator.recall import recall_curated_first
from ..engine.dense import EmbeddingBacklog, QueryBatcher, load_embedder, query_vector
from ..engine.episodes import recall_query
from ..engine.heap import HEAP
from ..engine.index import RecallAnswer, RecallQuery, recall_with_shared, visible_in
from ..engine.project_scope import project_of
from ..engine.pins import pinned_first
from ..engine.profile import PROFILE, newer
from ..engine.schedule import Deadline, RecallScheduler, timely_recall
from ..engine.record import GLOBAL_AGENT, StoredMemory, sources_joined
from ..engine.updates import marking_earlier
from ..engine.unreadable import UNREADABLE, memories_of
from .access_counts import AccessCounts
from .coherence import CoherentIndexes, SharedVersionReads, VersionedIndex
from .config import TieredSettings
from .extract import memories_from_entry
from .ltm import LTMUnavailable, MongoLTM
from .retain_group import RetainGroups
from .stm import RedisSTM


def stored_vectors(vecs: Any) -> list[list[float]]:
    """Vectors as MongoDB keeps them: floats rounded to 5 places. In numpy, not a Python `round`
    per number: 384 of them a memory took ~0.7 ms of the event loop, recalls waiting behind it."""
    import numpy as np  # present whenever there is an encoder
    return np.round(np.asarray(vecs, dtype=np.float64), 5).tolist()


class TieredMemory:
    def __init__(self, settings: TieredSettings, ltm: MongoLTM, stm: RedisSTM, *,
                 telemetry: Telemetry, redactor: Redactor) -> None:
        self.settings = settings
        self.ltm = ltm
        ltm.on_bad_row = self.bad_row
        self.stm = stm
        self.telemetry = telemetry
        self.redactor = redactor
        self.embedder = None  # the shipped MiniLM, loaded at start unless embeddings are off
        self.queries: QueryBatcher | None = None  # embeds recall queries, once the embedder is loaded
        self.indexes = CoherentIndexes(ltm, stm, self._new_index, settings.index_cache_mb * 1024 * 1024)
        self.versions = SharedVersionReads(stm)  # concurrent recalls share one MGET
        self.access = AccessCounts(ltm)
        self._background: set[asyncio.Task] = set()
        self.backlog: EmbeddingBacklog | None = None  # episodes waiting for a vector
        # fair recall slots per agent; background work yields to recalls
        self.scheduler = RecallScheduler(per_agent=settings.recalls_per_agent)
        self.curator: Any = None  # engine.curator.Curator when the operator turned it on (app.py)
        self.groups = RetainGroups(self._retain_together)  # an agent's retains arriving together: one write

    # -- lifecycle --

    async def load_embedder(self) -> None:
        self.embedder = await load_embedder(self.settings.embeddings, self.telemetry, self.settings.encoder_threads)
        if self.embedder is not None:
            self.backlog = EmbeddingBacklog(self.embedder, self.scheduler)
            self.queries = QueryBatcher(self.embedder, on_encoded=self.backlog.encoded)

    def bad_row(self, memory_id: str, error: str) -> None:
        """A stored memory that cannot be read or indexed is skipped, and said so: the operator
        can find it by id (the listing still shows it) and delete it."""
        self.telemetry.warning("memory_row_skipped", store="tiered", memory_id=memory_id, error=error)

    def _new_index(self) -> VersionedIndex:
        idx = VersionedIndex()
        if self.embedder is not None:
            from ..engine.dense import VectorIndex
            idx.vectors = VectorIndex(self.embedder.dim)
        return idx

    async def start(self, *, warm: bool = True) -> None:
        await self.load_embedder()
        for failure in await self.ltm.ensure_indexes():
            self.telemetry.warning("ltm_index_not_created", detail=failure)
        if rekeyed := await self.ltm.rekey_marks():
            self.telemetry.info("retained_marks_rekeyed", count=rekeyed)
        if warm:
            await self.warm_up()
        if self.backlog is not None:
            for m in await self.ltm.unembedded():  # a process stopped before it embedded them
                self.backlog.add(m, m.value)
            self.backlog.start(self._embed_batch, self._embedding_failed)

    @property
    def embedding_backlog(self) -> int:
        return len(self.backlog) if self.backlog is not None else 0

    def _embedding_failed(self, exc: Exception) -> None:
        """A broken model or store must not stop retains: words still find the memories."""
        self.telemetry.warning("embedding_failed", error=f"{type(exc).__name__}: {exc}"[:200])

    async def _embed_batch(self, batch: list[StoredMemory]) -> None:
        """Episodes are acknowledged once durable and searchable by their words; their vectors are
        computed here, stored in MongoDB, then loaded by every process's index (the same version
        bump as a write)."""
        vecs = await self.backlog.embed([m.value for m in batch])
        try:
            await self.ltm.set_vectors(list(zip(batch, stored_vectors(vecs))))
        except LTMUnavailable as exc:  # this process's index still gets them; a restart embeds again
            self.telemetry.warning("embedding_not_saved", error=str(exc)[:200])
        by_agent: dict[str, list[tuple[str, Any]]] = {}
        for m, v in zip(batch, vecs):
            by_agent.setdefault(m.agent_id, []).append((m.id, v))
        for agent_id, vectors in by_agent.items():
            await self.indexes.embedded(agent_id, vectors)

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
        await self.groups.close()
        if self.backlog is not None:
            await self.backlog.stop()
        if self.queries is not None:
            self.queries.close()
        await self.access.close()
        for t in list(self._background):
            t.cancel()
        await asyncio.gather(*self._background, return_exceptions=True)
        await self.stm.close()
        await self.ltm.close()

    def spawn(self, coro) -> None:
        """Run a background task that `close` cancels (consolidation, count flushing)."""
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    # -- writes --

    async def store(self, m: StoredMemory) -> tuple[StoredMemory, bool]:
        """Upsert one memory into both tiers and enforce the LTM cap.

        A keyed fact said earlier than the one already stored (a late retain or a backfill)
        does not overwrite it: the newest statement of a fact wins.
        """
        m.key, m.value, m.metadata, _ = await self.redactor.fields_async(m.key, m.value, m.metadata)
        if m.said_at is not None and m.key.startswith(PROFILE):
            current = await self.ltm.by_key(m.agent_id, m.scope, m.session_id, m.key)
            if not newer(m, current):
                return current, False
        if self.backlog is not None and m.embedding is None:
            # on the backlog's low-priority thread, after the recalls in hand (never at recall's
            # priority); stored with its vector, so a search right after the store finds it by meaning
            m.embedding = stored_vectors(await self.backlog.embed([m.value]))[0]
        stored, created = await self.ltm.upsert(m)
        removed = await self.ltm.enforce_cap(stored.agent_id, self.settings.ltm_max_entries)
        await self.stm.put([stored])
        if removed:
            await self.stm.remove(stored.agent_id, removed)
        await self.indexes.written(stored.agent_id, [stored], removed)
        return stored, created

    # -- the REST API's operations (memory_adapters/http/rest_api.py) --

    async def store_memory(self, m: StoredMemory) -> tuple[StoredMemory, bool]:
        return await self.store(m)

    async def get_memory(self, memory_id: str) -> StoredMemory | None:
        return await self.ltm.get(memory_id)

    async def page(self, *, agent_id: str, scope: str | None, type_: str | None, session_id: str | None,
                   limit: int, after: tuple[float, str] | None,
                   since: float | None = None, until: float | None = None) -> list[StoredMemory]:
        return await self.ltm.page(agent_id=agent_id, scope=scope, type_=type_, session_id=session_id,
                                   now=time.time(), limit=limit, after=after, since=since, until=until)

    async def record_audit(self, entry: dict[str, Any]) -> None:
        await self.ltm.add_audit(entry)

    async def audit_trail(self, *, agent_id: str, memory_id: str | None, limit: int) -> list[dict[str, Any]]:
        return await self.ltm.audit(agent_id=agent_id, memory_id=memory_id, limit=limit)

    async def search(self, agent_id: str, query: str, *, top_k: int, session_id: str | None = None,
                     type_filter: set[str] | None = None, min_importance: float | None = None
                     ) -> list[tuple[StoredMemory, float]]:
        remote, = await self.versions.get([agent_id])
        idx = await self.indexes.get(agent_id, remote)
        vector = await query_vector(self.queries, query)
        return idx.search(query, vector, top_k=top_k, visible=visible_in(session_id, time.time()),
                          type_filter=type_filter, min_importance=min_importance)

    async def delete_memory(self, memory_id: str) -> bool:
        return await self.delete(memory_id)

    async def merge(self, agent_id: str, keep: StoredMemory, merged_ids: list[str]) -> None:
        """Consolidation: `keep` takes the place of the near-duplicates `merged_ids` in both tiers."""
        await self.ltm.replace(keep)
        await self.ltm.delete(merged_ids)
        await self.stm.remove(agent_id, merged_ids)
        await self.stm.put([keep])
        await self.indexes.written(agent_id, [keep], merged_ids)

    async def remove(self, agent_id: str, memory_ids: list[str]) -> None:
        """Consolidation's pruning: these memories leave both tiers and the index."""
        await self.ltm.delete(memory_ids)
        await self.stm.remove(agent_id, memory_ids)
        await self.indexes.written(agent_id, [], memory_ids)

    async def delete(self, memory_id: str) -> bool:
        m = await self.ltm.get(memory_id)
        if m is None:
            return False
        await self.ltm.delete([memory_id])
        await self.stm.remove(m.agent_id, [memory_id])
        await self.indexes.written(m.agent_id, [], [memory_id])
        return True

    async def retain(self, req: RetainRequest) -> str:
        return (await self.groups.retain([req]))[0]

    async def retain_many(self, reqs: list[RetainRequest]) -> list[str]:
        """One agent's retains; with those of its calls that arrive meanwhile, one write (retain_group.py)."""
        return await self.groups.retain(reqs)

    async def _retain_together(self, reqs: list[RetainRequest]) -> list[str]:
        """One agent's retains together: one query for what was seen, one bulk write to MongoDB for
        the episodes and one for the keyed facts and typed statements, then Redis, the index and
        the retained marks at once (Redis: one script run and one version bump). Vectors follow
        in the background (`_embed_batch`). The marks are written only once every memory is in
        MongoDB: a failure before leaves the entries unseen, and their retry writes them again."""
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
            made = await memories_of(self.redactor, self.telemetry, memories_from_entry, agent_id, req.entry, req.metadata)
            if made is None:
                outcomes.append(UNREADABLE)  # not marked retained: a fixed engine reads it on backfill
                continue
            episodes += [m for m in made if m.key.startswith("episode:")]
            keyed += [m for m in made if not m.key.startswith("episode:")]
            fresh.append(eid)
            outcomes.append("stored" if made else "empty")
        keyed, new = await self._keyed(agent_id, keyed)
        inserted = (await asyncio.gather(self.ltm.upsert_many(episodes), self.ltm.upsert_keyed(keyed)))[1]
        if new - inserted:  # another replica stored the same key meanwhile: its id, merged sources
            keyed = await self._as_stored(agent_id, keyed)
        written = episodes + keyed
        removed = await self.ltm.enforce_cap(agent_id, self.settings.ltm_max_entries) if written else []
        unembedded = [m for m in written if m.embedding is None]  # the index takes the vectors it is given
        await asyncio.gather(self.stm.put(written), self.ltm.mark_retained_many(agent_id, fresh),
                             self.indexes.written(agent_id, written, removed) if written or removed else asyncio.sleep(0))
        if removed:
            await self.stm.remove(agent_id, removed)
        if self.backlog is not None:
            for m in unembedded:
                self.backlog.add(m, m.value)
        if self.curator is not None:  # counts only; the curator works in the background
            self.curator.observe(agent_id, episodes)
        return outcomes

    async def _keyed(self, agent_id: str, made: list[StoredMemory]) -> tuple[list[StoredMemory], set[int]]:
        """A batch's keyed facts and typed statements as `store` writes them one at a time: redacted;
        a profile fact said earlier than the one its key holds left out (the newest statement wins);
        one that replaces a stored memory takes its id, and its vector when the text is the same
        (else the background embeds the new text). Their vectors are not made here: they join the
        episodes' in the background instead of each holding the batch for an encoder call.
        Also returns the positions of those no stored memory holds the key of (to be inserted)."""
        if not made:
            return [], set()
        for m in made:
            m.key, m.value, m.metadata, _ = await self.redactor.fields_async(m.key, m.value, m.metadata)
        current = {(c.scope, c.session_id, c.key): c for c in await self.ltm.by_keys(agent_id, [m.key for m in made])}
        out: dict[tuple, StoredMemory] = {}
        for m in made:
            ident = (m.scope, m.session_id, m.key)
            cur = out.get(ident) or current.get(ident)
            if m.said_at is not None and m.key.startswith(PROFILE) and not newer(m, cur):
                continue
            if cur is not None:
                m.id, m.created_at = cur.id, cur.created_at
                m.access_count, m.last_accessed_at = cur.access_count, cur.last_accessed_at
                m.source_entry_ids = sources_joined(cur, m)
                if m.embedding is None and cur.value == m.value:
                    m.embedding = cur.embedding
            out.pop(ident, None)
            out[ident] = m  # in the order written
        kept = list(out.values())
        return kept, {i for i, m in enumerate(kept) if (m.scope, m.session_id, m.key) not in current}

    async def _as_stored(self, agent_id: str, keyed: list[StoredMemory]) -> list[StoredMemory]:
        """The keyed memories as MongoDB holds them now (their ids, merged sources)."""
        stored = {(c.scope, c.session_id, c.key): c for c in await self.ltm.by_keys(agent_id, [m.key for m in keyed])}
        return [stored.get((m.scope, m.session_id, m.key), m) for m in keyed]

    async def forget(self, req: ForgetRequest) -> int:
        await self.ltm.tombstone(req.agent_id, req.entry_ids, req.reason)
        ids = await self.ltm.by_source(req.agent_id, req.entry_ids)
        await self.ltm.delete(ids)
        await self.stm.remove(req.agent_id, ids)
        await self.indexes.written(req.agent_id, [], ids)
        return len(ids)

    # -- reads --

    async def recall(self, req: RecallRequest) -> list[RecalledMemory]:
        """The engine's recall (memory_adapters/engine): fused ranking, neighbours, dated blocks
        packed to the proxy's budget; the two best matching global memories first. Answered
        before `deadline_ms` with the best it has (engine/schedule.py), saying which ranking."""
        deadline = Deadline(req.deadline_ms)
        query = recall_query(req.query if req.query is not None else query_from(req.messages))
        if not query.strip():
            return RecallAnswer([], "none: no query")
        session_id = req.metadata.get("session_id") if isinstance(req.metadata.get("session_id"), str) else None
        budget = req.budget_tokens or self.settings.recall_budget_tokens
        max_blocks = req.max_blocks or DEFAULT_MAX_BLOCKS
        loaded: list = []

        async def indexes():
            remote, gremote = await self.versions.get([req.agent_id, GLOBAL_AGENT])
            loaded[:] = [await self.indexes.get(req.agent_id, remote), await self.indexes.get(GLOBAL_AGENT, gremote)]
            return tuple(loaded)

        def stale():
            own, shared = self.indexes.current(req.agent_id), self.indexes.current(GLOBAL_AGENT)
            if own is None:
                return None
            loaded[:] = [own, shared] if shared is not None else [own]
            return own, shared

        packed = await timely_recall(self.scheduler, self.queries, req.agent_id, deadline, indexes,
                                     RecallQuery(query, budget_tokens=budget, max_blocks=max_blocks,
                                                 session_id=session_id),
                                     visible=visible_in(session_id, time.time(), project_of(req.metadata)), stale=stale,
                                     recall=pinned_first(marking_earlier(
                                         recall_curated_first if self.curator else recall_with_shared)))
        blocks = [RecalledMemory(text=p.text, score=p.score, kind=p.kind, source="tiered", ts=p.ts, id=p.id,
                                 origin=p.origin, writer=p.writer, bounded=wire_bounded(p.origin, p.bounded))
                  for p in packed]
        picked = [ix.memories[i] for p in packed for i in p.memory_ids for ix in loaded if i in ix.memories]
        if picked:
            self.access.recalled(picked)
        return RecallAnswer(blocks, packed.ranking)

    def loaded_memories(self) -> int:
        return len(self.indexes)

    async def health(self) -> dict[str, Any]:
        mongo = await self.ltm.ping()
        redis_ok = await self.stm.version("_health") is not None
        return {"status": "ok" if mongo else "degraded", "adapter": "tiered", "mongo": mongo, "redis": redis_ok,
                "embeddings": self.embedder is not None, "encoder": getattr(self.embedder, "engine", None),
                "embedding_backlog": self.embedding_backlog,
                "embedded": self.backlog.embedded if self.backlog is not None else 0,
                "embedded_from_queries": self.backlog.reused if self.backlog is not None else 0,
                "recall_scheduling": self.scheduler.stats.as_dict(), "gc": HEAP.as_dict(),
                "version_reads": {"reads": self.versions.reads, "asked": self.versions.asked},
                "index_loads": self.indexes.loads,
                "retain_groups": {"writes": self.groups.writes, "entries": self.groups.entries},
                "access_counts": {"counted": self.access.counted, "written": self.access.written},
                "query_encoder": ({k: round(v, 3) for k, v in self.queries.stats.items()}
                                  if self.queries is not None else None)}
