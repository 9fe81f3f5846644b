"""The embedded memory service: contract operations and the REST operations over the engine.

Each agent's memories are loaded from SQLite into an engine `AgentIndex` on first use and kept
current by every write. Several processes may serve one store (`memplane adapter embedded --workers
N`: SQLite in WAL mode has many readers beside one writer at a time): each logs its writes, and each
applies the others' on its next call (`_catch_up`), so every process answers as one would. A retain is durable when it returns (one SQLite transaction per call or
batch) and searchable by words at once; its embedding is computed in the background, in batches
on a worker thread, so ingest keeps up with talk (a memory without a vector yet is ranked by its
words alone).
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import numpy as np

from memplane_core.contract import (
    DEFAULT_BUDGET_TOKENS,
    DEFAULT_MAX_BLOCKS,
    ForgetRequest,
    RecalledMemory,
    RecallRequest,
    RetainRequest,
)
from memplane_core.instants import epoch_ok
from memplane_core.provenance import wire_bounded
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry
from memplane_core.turn_text import query_from

from ..engine.curator.recall import recall_curated_first
from ..engine.dense import EmbeddingBacklog, QueryBatcher, query_vector
from ..engine.episodes import episodes_from_entry, recall_query
from ..engine.heap import HEAP
from ..engine.index import AgentIndex, RecallAnswer, RecallQuery, recall_with_shared, visible_in
from ..engine.pins import pinned_first
from ..engine.profile import PROFILE, newer, profile_memories
from ..engine.project_scope import project_of, scope_to_project
from ..engine.schedule import Deadline, RecallScheduler, timely_recall
from ..engine.record import GLOBAL_AGENT, StoredMemory, sources_joined
from ..engine.unreadable import UNREADABLE, memories_of
from ..engine.updates import marking_earlier
from .sqlite_store import SQLiteStore


LOAD_STEP = 100  # memories indexed between yields to the event loop while an agent loads (~10 ms)
RETAIN_STEP = 20  # a retain's new memories indexed between yields (a multi-megabyte turn is thousands)


class EmbeddedMemory:
    def __init__(self, store: SQLiteStore, redactor: Redactor, telemetry: Telemetry, *,
                 max_memories_per_agent: int = 0, scheduler: RecallScheduler | None = None,
                 embeds_loaded: bool = True) -> None:
        self.store = store
        # whether memories found without a vector when an agent loads are embedded here: with several
        # processes over one store only the first does it (the others get the vectors from its log)
        self.embeds_loaded = embeds_loaded
        self._position = 0  # in the store's change log (several processes): applied up to here
        self._seen: int | None = None  # the store's data_version when last caught up
        self._catching = asyncio.Lock()
        self.caught_up = 0  # catch-ups that applied other processes' changes (health)
        store.on_bad_row = self.bad_row
        self.redactor = redactor
        self.telemetry = telemetry
        # past this many memories an agent's oldest episodes are evicted (0: never)
        self.max_memories_per_agent = max(0, max_memories_per_agent)
        self.evicted = 0
        self.scheduler = scheduler or RecallScheduler()
        self.embedder: Any = None  # engine.dense.Embedder once `start` is given one; else lexical recall only
        self.queries: QueryBatcher | None = None  # embeds recall queries, with the embedder
        self._indexes: dict[str, AgentIndex] = {}
        self._loading: dict[str, asyncio.Lock] = {}
        self._locks: dict[str, asyncio.Lock] = {}
        self._tombstones: dict[str, set[str]] = {}
        self.backlog: EmbeddingBacklog | None = None  # (agent, memory id) waiting for a vector
        self.curator: Any = None  # engine.curator.Curator when the operator turned it on (app.py)

    # -- lifecycle --

    async def start(self, embedder: Any = None) -> None:
        """Open the store; `embedder` (engine.dense.Embedder), when given, turns dense recall on."""
        if embedder is not None:
            self.embedder = embedder
            self.backlog = EmbeddingBacklog(embedder, self.scheduler)
            self.queries = QueryBatcher(embedder, on_encoded=self.backlog.encoded)
        await self.store.open()
        if self.store.writer is not None:
            self._seen = self.store.data_version()
            self._position = await self.store.last_change()
        if self.backlog is not None:
            self.backlog.start(self._embed_batch, self._embedding_failed)

    async def close(self) -> None:
        if self.backlog is not None:
            await self.backlog.stop()
        if self.queries is not None:
            self.queries.close()
        await self.store.close()

    def loaded_memories(self) -> int:
        return sum(len(idx) for idx in self._indexes.values())

    @property
    def embedding_backlog(self) -> int:
        return len(self.backlog) if self.backlog is not None else 0

    # -- the per-agent index --

    def _new_index(self) -> AgentIndex:
        if self.embedder is None:
            return AgentIndex()
        from ..engine.dense import VectorIndex
        return AgentIndex(vectors=VectorIndex(self.embedder.dim))

    async def _index(self, agent_id: str) -> AgentIndex:
        idx = self._indexes.get(agent_id)
        if idx is not None:
            return idx
        async with self._loading.setdefault(agent_id, asyncio.Lock()):
            if agent_id not in self._indexes:
                idx = self._new_index()
                start = self._position
                rows = [(m, self._vector(vector, m.id)) for m, vector in await self.store.load(agent_id)]
                # a cold agent's load yields to the loop every LOAD_STEP rows: others' recalls go on
                await idx.load_stepwise(rows, self.bad_row, LOAD_STEP)
                if self.backlog is not None and self.embeds_loaded:
                    for m, vec in rows:
                        if vec is None and m.id in idx.memories:
                            self.backlog.add((agent_id, m.id), m.value)
                tombs = await self.store.tombstones(agent_id)
                if self._position != start:  # others' changes were applied meanwhile, without this agent
                    got = await self.store.changes_since(start)
                    self._apply(got.items, {agent_id: idx}, {agent_id: tombs})
                self._tombstones[agent_id] = tombs
                self._indexes[agent_id] = idx
        return self._indexes[agent_id]

    async def _both(self, agent_id: str) -> tuple[AgentIndex, AgentIndex]:
        return await self._index(agent_id), await self._index(GLOBAL_AGENT)

    def bad_row(self, memory_id: str, error: str) -> None:
        """A stored row that cannot be read or indexed is skipped, and said so (the store's
        `on_bad_row` too): the operator can find it by id and delete it."""
        self.telemetry.warning("memory_row_skipped", store="embedded", memory_id=memory_id, error=error)

    async def _catch_up(self) -> None:
        """Apply what other processes wrote to the indexes this one holds (several processes over
        one store; a no-op otherwise). Asked on every call; costs a `data_version` read unless
        someone wrote."""
        if self._seen is None or self.store.data_version() == self._seen:
            return
        async with self._catching:
            version = self.store.data_version()
            if version == self._seen:
                return
            got = await self.store.changes_since(self._position)  # read after `version`: covers it
            self._seen, self._position = version, got.position
            if got.gap:  # the log was pruned past us: hold nothing, load afresh on the next call
                self._indexes.clear()
                self._tombstones.clear()
                return
            self._apply(got.items, self._indexes, self._tombstones)
            if got.items:
                await asyncio.sleep(0)

    def _apply(self, items: list, indexes: dict[str, AgentIndex], tombstones: dict[str, set[str]]) -> None:
        """Other processes' changes, to the agents in `indexes` (others load as they are now). Each
        is idempotent (a put re-reads the row as it is now), so one applied twice does no harm. A
        change this process cannot apply (a garbled vector, a row it cannot index) is reported and
        skipped, as a bad row is on load: the log has moved past it, so failing here would lose
        every change after it too."""
        for kind, agent_id, item, memory, vector in items:
            idx = indexes.get(agent_id)
            if idx is None:
                continue
            try:
                if kind == "tomb":
                    tombstones.setdefault(agent_id, set()).add(item)
                elif kind == "drop" or (kind == "put" and memory is None):
                    idx.drop(item)
                elif kind == "put":
                    idx.put(memory, self._vector(vector, item))
                elif kind == "vector" and vector is not None and item in idx.memories:
                    found = self._vector(vector, item)
                    if found is not None:
                        idx.add_vector(item, found)
            except Exception as exc:  # noqa: BLE001 - whatever the row holds, the next change applies
                self.bad_row(str(item), f"{type(exc).__name__}: {exc}"[:300])
                continue
            self.caught_up += 1

    def _vector(self, raw: bytes | None, item: str = "?") -> Any:
        """A stored vector, or None (a garbled one is reported: its memory is still found by words)."""
        if not raw or self.embedder is None:
            return None
        try:
            vector = np.frombuffer(raw, dtype=np.float32)
        except ValueError as exc:
            self.bad_row(item, f"vector: {exc}"[:300])
            return None
        dim = getattr(self.embedder, "dim", None)
        if dim is not None and vector.shape != (dim,):
            self.bad_row(item, f"vector: {vector.shape[0]} dimensions, not {dim}")
            return None
        return vector

    def _lock(self, agent_id: str) -> asyncio.Lock:
        return self._locks.setdefault(agent_id, asyncio.Lock())

    def _embedding_failed(self, exc: Exception) -> None:
        """A broken model or store must not stop retains: words still find the memories."""
        self.telemetry.warning("embedding_failed", error=f"{type(exc).__name__}: {exc}"[:200])

    async def _embed_batch(self, batch: list[tuple[str, str]]) -> None:
        """Embed memories still indexed; the vectors go into the index, then into SQLite."""
        todo = [(a, self._indexes[a].memories[i]) for a, i in batch
                if a in self._indexes and i in self._indexes[a].memories]
        if not todo:
            return
        vecs = await self.backlog.embed([m.value for _, m in todo])
        for (agent_id, m), vec in zip(todo, vecs):
            self._indexes[agent_id].add_vector(m.id, vec)
        try:
            await self.store.set_vectors([(m.id, np.asarray(v, dtype=np.float32).tobytes())
                                          for (_, m), v in zip(todo, vecs)])
        except Exception as exc:
            self.telemetry.warning("embedding_not_saved", error=f"{type(exc).__name__}: {exc}"[:200])

    # -- contract --

    async def retain(self, req: RetainRequest) -> str:
        return (await self.retain_many([req]))[0]

    async def retain_many(self, reqs: list[RetainRequest]) -> list[str]:
        """Several of one agent's retains in one transaction; an outcome per request, in order."""
        if not reqs:
            return []
        agent_id = reqs[0].agent_id
        await self._catch_up()  # another process's forget: its tombstones
        idx = await self._index(agent_id)
        async with self._lock(agent_id):
            ids = [r.entry["id"] for r in reqs]
            done = await self.store.retained(agent_id, ids)
            tomb = self._tombstones.setdefault(agent_id, set())
            outcomes: list[str] = []
            put: list[StoredMemory] = []
            marks: list[tuple[str, str]] = []
            seen: set[str] = set()
            for req, eid in zip(reqs, ids):
                if eid in tomb:
                    outcomes.append("tombstoned")
                elif eid in done or eid in seen:
                    outcomes.append("duplicate")
                else:
                    seen.add(eid)
                    made = await memories_of(self.redactor, self.telemetry, _memories_from_entry, agent_id,
                                             req.entry, req.metadata)
                    if made is None:
                        outcomes.append(UNREADABLE)  # not marked retained: a fixed engine reads it on backfill
                        continue
                    made = scope_to_project(made, req.metadata)
                    put += await self._keyed(made, put, idx)
                    marks.append((agent_id, eid))
                    outcomes.append("stored" if made else "empty")
            if marks:
                await self.store.write(put, retained=marks)
                for n, m in enumerate(put):
                    idx.put(m)
                    if self.backlog is not None:
                        self.backlog.add((agent_id, m.id), m.value)
                    if n % RETAIN_STEP == RETAIN_STEP - 1:
                        await asyncio.sleep(0)  # a huge turn's pieces: other agents' recalls run between
                await self._enforce_cap(agent_id, idx)
                if self.curator is not None:  # counts only; the curator works in the background
                    self.curator.observe(agent_id, put)
            return outcomes

    async def _keyed(self, made: list[StoredMemory], put: list[StoredMemory], idx: AgentIndex) -> list[StoredMemory]:
        """`made` with each profile fact taking the id of the one its key already holds (stored, or
        earlier in this batch `put`), and left out when that one was said later (profile.newer); and
        each memory that replaces one of its id (that fact, a tool loop's episode kept from its
        latest step) naming the entries the replaced one came from too, as tiered does."""
        out = []
        for m in made:
            if m.key.startswith(PROFILE):
                current = next((p for p in reversed(put) if p.key == m.key and p.scope == m.scope
                                and p.session_id == m.session_id), None)
                if current is None:
                    current = await self.store.by_key(m.agent_id, m.scope, m.session_id, m.key)
                if not newer(m, current):
                    continue
                if current is not None:
                    m.id, m.created_at = current.id, current.created_at
            replaced = next((p for p in reversed(put) if p.id == m.id), None) or idx.memories.get(m.id)
            if replaced is not None:
                m.source_entry_ids = sources_joined(replaced, m)
            out.append(m)
        return out

    async def _enforce_cap(self, agent_id: str, idx: AgentIndex) -> None:
        """Past `max_memories_per_agent`, the oldest episodes (by when they were said) leave the
        store and the index; what a person wrote through the REST API stays."""
        excess = len(idx) - self.max_memories_per_agent
        if not self.max_memories_per_agent or excess <= 0:
            return
        oldest = []
        for *_, memory_id in idx.order:
            if idx.memories[memory_id].type == "episode":
                oldest.append(memory_id)
                if len(oldest) >= excess:
                    break
        if not oldest:
            return
        await self.store.write([], dropped=oldest)
        for memory_id in oldest:
            idx.drop(memory_id)
        self.evicted += len(oldest)
        self.telemetry.info("memories_evicted", agent_id=agent_id, count=len(oldest),
                            cap=self.max_memories_per_agent)

    async def forget(self, req: ForgetRequest) -> int:
        idx = await self._index(req.agent_id)
        async with self._lock(req.agent_id):
            removed = await self.store.forget(req.agent_id, req.entry_ids, req.reason, time.time())
            self._tombstones.setdefault(req.agent_id, set()).update(req.entry_ids)
            for memory_id in removed:
                idx.drop(memory_id)
            return len(removed)

    async def recall(self, req: RecallRequest) -> list[RecalledMemory]:
        """Answered before `deadline_ms` with the best the engine has (engine/schedule.py); the
        answer says which ranking answered."""
        deadline = Deadline(req.deadline_ms)
        await self._catch_up()
        text = recall_query(req.query if req.query is not None else query_from(req.messages))
        if not text.strip():
            return RecallAnswer([], "none: no query")
        session_id = req.metadata.get("session_id") if isinstance(req.metadata.get("session_id"), str) else None
        budget = _positive(getattr(req, "budget_tokens", None), DEFAULT_BUDGET_TOKENS)
        max_blocks = _positive(getattr(req, "max_blocks", None), DEFAULT_MAX_BLOCKS)

        def indexes() -> Any:
            """The agent's and the global index (usually empty), at once when both are loaded."""
            own, shared = self._indexes.get(req.agent_id), self._indexes.get(GLOBAL_AGENT)
            return (own, shared) if own is not None and shared is not None else self._both(req.agent_id)

        packed = await timely_recall(self.scheduler, self.queries, req.agent_id, deadline, indexes,
                                     RecallQuery(text, budget_tokens=budget, max_blocks=max_blocks,
                                                 session_id=session_id),
                                     visible=visible_in(session_id, time.time(), project_of(req.metadata)),
                                     recall=pinned_first(marking_earlier(
                                         recall_curated_first if self.curator else recall_with_shared)))
        return RecallAnswer([RecalledMemory(text=p.text, score=p.score, kind=p.kind, source="embedded", ts=p.ts,
                                            id=p.id, origin=p.origin, writer=p.writer,
                                            bounded=wire_bounded(p.origin, p.bounded)) for p in packed],
                            packed.ranking)

    async def health(self) -> dict[str, Any]:
        return {"status": "ok", "adapter": "embedded", "data_dir": str(self.store.data_dir),
                "embeddings": self.embedder is not None, "encoder": getattr(self.embedder, "engine", None),
                "embedding_backlog": self.embedding_backlog,
                "embedded": self.backlog.embedded if self.backlog is not None else 0,
                "embedded_from_queries": self.backlog.reused if self.backlog is not None else 0,
                "recall_scheduling": self.scheduler.stats.as_dict(), "gc": HEAP.as_dict(), "evicted": self.evicted,
                "pid": os.getpid(), "changes_applied": self.caught_up,
                "query_encoder": ({k: round(v, 3) for k, v in self.queries.stats.items()}
                                  if self.queries is not None else None)}

    # -- REST operations (memory_adapters/http/rest_api.py) --

    async def store_memory(self, m: StoredMemory) -> tuple[StoredMemory, bool]:
        """Upsert by (agent, scope, session, key): the same key replaces the value, keeps the id."""
        idx = await self._index(m.agent_id)
        async with self._lock(m.agent_id):
            old = await self.store.by_key(m.agent_id, m.scope, m.session_id, m.key)
            if old is not None:
                m.id = old.id
                if epoch_ok(old.created_at):  # a row an older version wrote with a bad time is healed
                    m.created_at = old.created_at
            m.key, m.value, m.metadata, _ = await self.redactor.fields_async(m.key, m.value, m.metadata)
            await self.store.write([m])
            idx.put(m)
            if self.backlog is not None:
                self.backlog.add((m.agent_id, m.id), m.value)
            await self._enforce_cap(m.agent_id, idx)
            return m, old is None

    async def get_memory(self, memory_id: str) -> StoredMemory | None:
        return await self.store.get(memory_id)

    async def page(self, *, agent_id: str, scope: str | None, type_: str | None, session_id: str | None,
                   limit: int, after: tuple[float, str] | None,
                   since: float | None = None, until: float | None = None) -> list[StoredMemory]:
        return await self.store.page(agent_id=agent_id, scope=scope, type_=type_, session_id=session_id,
                                     now=time.time(), limit=limit, after=after, since=since, until=until)

    async def record_audit(self, entry: dict[str, Any]) -> None:
        await self.store.add_audit(entry)

    async def audit_trail(self, *, agent_id: str, memory_id: str | None, limit: int) -> list[dict[str, Any]]:
        return await self.store.audit(agent_id=agent_id, memory_id=memory_id, limit=limit)

    async def search(self, agent_id: str, query: str, *, top_k: int, session_id: str | None = None,
                     type_filter: set[str] | None = None, min_importance: float | None = None
                     ) -> list[tuple[StoredMemory, float]]:
        await self._catch_up()
        idx = await self._index(agent_id)
        vector = await query_vector(self.queries, query)
        return idx.search(query, vector, top_k=top_k, visible=visible_in(session_id, time.time()), type_filter=type_filter,
                          min_importance=min_importance)

    async def delete_memory(self, memory_id: str) -> bool:
        m = await self.store.get(memory_id)
        if m is None:
            return False
        async with self._lock(m.agent_id):
            await self.store.write([], dropped=[memory_id])
            if m.agent_id in self._indexes:
                self._indexes[m.agent_id].drop(memory_id)
        return True


def _memories_from_entry(agent_id: str, entry: dict[str, Any], metadata: dict[str, Any],
                         redactor: Redactor) -> list[StoredMemory]:
    """The turn's episodes and the profile facts the person's words state (profile.py)."""
    episodes = episodes_from_entry(agent_id, entry, metadata, redactor)
    return episodes + profile_memories(agent_id, entry, episodes) if episodes else []


def _positive(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default
