"""Keeping each agent's in-process index coherent across adapter processes.

Every write, by any process, bumps the agent's version in Redis. A process serves from its own
index while every bump since it loaded was its own (or is still on its way to Redis); otherwise
it reloads the agent from MongoDB. With Redis away it trusts its index for INDEX_MAX_AGE_S.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..engine.index import AgentIndex
from ..engine.record import StoredMemory
from .index_cache import IndexCache
from .ltm import LTMUnavailable, MongoLTM
from .stm import RedisSTM

INDEX_MAX_AGE_S = 30.0
LOAD_STEP = 100  # memories indexed between yields to the event loop (~10 ms)
WRITE_STEP = 20  # memories a write puts into the index between yields (a multi-megabyte turn is thousands)


@dataclass
class VersionedIndex(AgentIndex):
    """The engine's index of one agent, plus the Redis version it reflects."""

    version: int | None = None
    loaded_at: float = 0.0
    own: set[int] = field(default_factory=set)  # version bumps this process made
    inflight: int = 0  # bumps on their way to Redis

    def put(self, m: StoredMemory, vector: Any = None) -> None:
        if vector is None and m.embedding is not None and self.vectors is not None:
            import numpy as np  # present whenever vectors are
            vector = np.asarray(m.embedding, dtype=np.float32)
        super().put(m, vector)
        m.embedding = None  # the matrix holds it; a list of floats per object would cost ~9 KB

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


class SharedVersionReads:
    """Agents' versions for the recalls that ask at the same moment, in one Redis MGET.

    Why: every recall read its agent's (and the global) version with its own round trip; under load
    those reads queued behind each other on the client's connection pool and the event loop (2.4-11 ms a
    recall in bench.busy). A read starts at once when none is under way (no wait added to a lone
    recall); a recall asking while one is under way joins the next read — never the one already sent,
    which may predate a write the caller already saw — and that one read answers all who joined.
    """

    def __init__(self, stm: RedisSTM) -> None:
        self.stm = stm
        self._next: dict[str, asyncio.Future] | None = None  # agents asked for the read after the current one
        self._task: asyncio.Task | None = None
        self.reads = 0  # MGETs sent (bench: reads per recall)
        self.asked = 0  # versions asked for

    async def get(self, agent_ids: list[str]) -> list[int | None]:
        self.asked += len(agent_ids)
        loop = asyncio.get_running_loop()
        if self._next is None:
            self._next = {}
        futures = [self._next.setdefault(a, loop.create_future()) for a in agent_ids]
        if self._task is None:
            self._task = asyncio.create_task(self._read_loop())
        # shield: one caller giving up (a recall's deadline) must not cancel the others' answer
        return [await asyncio.shield(f) for f in futures]

    async def _read_loop(self) -> None:
        """Send reads while callers wait for one: each read takes everyone who asked before it was sent."""
        batch: dict[str, asyncio.Future] = {}
        try:
            while self._next:
                batch, self._next = self._next, None
                self.reads += 1
                try:
                    versions = await self.stm.versions(list(batch))
                except Exception as exc:  # stm.versions maps Redis errors to None; anything else: waiters learn it
                    for f in batch.values():
                        f.set_exception(exc)
                    continue
                for f, v in zip(batch.values(), versions):
                    f.set_result(v)
        finally:
            self._task = None
            for f in [*batch.values(), *(self._next or {}).values()]:  # cancelled at shutdown: nobody waits forever
                if not f.done():
                    f.cancel()
            self._next = None


class CoherentIndexes:
    """This process's indexes, one per agent, loaded from MongoDB and invalidated through Redis."""

    def __init__(self, ltm: MongoLTM, stm: RedisSTM, new_index: Callable[[], VersionedIndex],
                 max_bytes: int = 0) -> None:
        self.ltm = ltm
        self.stm = stm
        self.new_index = new_index
        self._indexes = IndexCache(max_bytes)  # LRU over agents under --index-cache-mb (0 = unbounded)
        self._locks: dict[str, asyncio.Lock] = {}

    def __len__(self) -> int:
        """Memories loaded across all agents (the adapter's gauge)."""
        return sum(len(idx) for idx in self._indexes.values())

    async def get(self, agent_id: str, remote: int | None) -> VersionedIndex:
        """The agent's index, reloaded from MongoDB when Redis's version shows writes this
        process did not make; `remote` is that version (None: Redis is away)."""
        idx = self._indexes.get(agent_id)
        if idx is not None and (remote == idx.version or idx.fresh_for(remote) or
                                (remote is None and time.time() - idx.loaded_at <= INDEX_MAX_AGE_S)):
            return idx
        async with self._locks.setdefault(agent_id, asyncio.Lock()):
            idx = self._indexes.get(agent_id)
            if idx is not None and idx.version == remote and remote is not None:
                return idx
            try:
                loaded = await self.ltm.all_for(agent_id)
            except LTMUnavailable:
                if idx is not None:
                    return idx  # serve what we have while MongoDB is away
                raise
            fresh = self.new_index()
            fresh.version, fresh.loaded_at = remote, time.time()
            await fresh.load_stepwise(((m, None) for m in loaded), self.ltm.on_bad_row, LOAD_STEP)
            self._indexes[agent_id] = fresh
            return fresh

    def current(self, agent_id: str) -> VersionedIndex | None:
        """The agent's index as loaded, even if a reload is due: what a recall short of time uses."""
        return self._indexes.get(agent_id)

    async def written(self, agent_id: str, put: list[StoredMemory], dropped: list[str]) -> None:
        """After a write reached both tiers: update our index and bump the agent's version."""
        idx = self._indexes.get(agent_id)
        if idx is not None:
            for n, m in enumerate(put):
                idx.put(m)
                if n % WRITE_STEP == WRITE_STEP - 1:
                    await asyncio.sleep(0)  # a huge turn's pieces: other agents' recalls run between
            for mid in dropped:
                idx.drop(mid)
        await self._bump(agent_id, idx)

    async def embedded(self, agent_id: str, vectors: list[tuple[str, Any]]) -> None:
        """Vectors computed after their memories were written (and stored in MongoDB): into our
        index, and a version bump so that other processes load them too."""
        idx = self._indexes.get(agent_id)
        if idx is not None:
            for memory_id, vector in vectors:
                idx.add_vector(memory_id, vector)
        await self._bump(agent_id, idx)

    async def _bump(self, agent_id: str, idx: VersionedIndex | None) -> None:
        if idx is not None:
            idx.inflight += 1
        try:
            version = await self.stm.bump_version(agent_id)
        finally:
            if idx is not None:
                idx.inflight -= 1
        if idx is not None and version is not None:
            idx.own.add(version)
