"""Keeping each agent's in-process index coherent across adapter processes.

Every write, by any process, bumps the agent's version in Redis. A process serves from its own
index while every bump since it loaded was its own (or is still on its way to Redis); otherwise
it reloads the agent from MongoDB. With Redis away it trusts its index for INDEX_MAX_AGE_S.

A reload takes a while (a long conversation is thousands of rows) and the agent keeps writing
meanwhile. Those writes are this process's own: they are replayed onto the new index when it is
swapped in and their version bumps count as its own, so one reload never makes the next one. (Before,
the new index missed them and every recall after it reloaded again, while the feed went on: 157 of
922 held-out-scale questions were answered from a stale index, `index reloading`.)
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

    def put(self, m: StoredMemory, vector: Any = None) -> None:
        if vector is None and m.embedding is not None and self.vectors is not None:
            import numpy as np  # present whenever vectors are
            vector = np.asarray(m.embedding, dtype=np.float32)
        super().put(m, vector)
        m.embedding = None  # the matrix holds it; a list of floats per object would cost ~9 KB

    def fresh_for(self, remote: int | None, inflight: int = 0) -> bool:
        """Whether every write since our version was our own (so no reload is needed); `inflight`:
        this process's bumps of the agent still on their way to Redis (their numbers not yet known)."""
        if remote is None or self.version is None:
            return False
        unexplained = [v for v in range(self.version + 1, remote + 1) if v not in self.own]
        if len(unexplained) <= inflight:
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


@dataclass
class _Load:
    """A load of one agent under way: what this process writes meanwhile, for the new index."""

    ops: list[tuple[str, Any, Any]] = field(default_factory=list)  # ("put", memory, vector) | ("drop", id, None) | ("vector", id, vector)
    own: set[int] = field(default_factory=set)  # version bumps made while it loads

    def replay(self, idx: VersionedIndex) -> None:
        for op, a, b in self.ops:
            if op == "put":
                a.embedding = b
                idx.put(a)
            elif op == "drop":
                idx.drop(a)
            else:
                idx.add_vector(a, b)
        idx.own |= self.own


class CoherentIndexes:
    """This process's indexes, one per agent, loaded from MongoDB and invalidated through Redis."""

    def __init__(self, ltm: MongoLTM, stm: RedisSTM, new_index: Callable[[], VersionedIndex],
                 max_bytes: int = 0) -> None:
        self.ltm = ltm
        self.stm = stm
        self.new_index = new_index
        self._indexes = IndexCache(max_bytes)  # LRU over agents under --index-cache-mb (0 = unbounded)
        self._locks: dict[str, asyncio.Lock] = {}
        self._loading: dict[str, _Load] = {}  # agent → its load under way (one at a time: the lock)
        self._inflight: dict[str, int] = {}  # agent → its version bumps on their way to Redis
        self.loads = 0  # agents loaded from MongoDB (first loads and reloads; /health)

    def __len__(self) -> int:
        """Memories loaded across all agents (the adapter's gauge)."""
        return sum(len(idx) for idx in self._indexes.values())

    async def get(self, agent_id: str, remote: int | None) -> VersionedIndex:
        """The agent's index, reloaded from MongoDB when Redis's version shows writes this
        process did not make; `remote` is that version (None: Redis is away)."""
        idx = self._indexes.get(agent_id)
        if idx is not None and self._usable(agent_id, idx, remote):
            return idx
        async with self._locks.setdefault(agent_id, asyncio.Lock()):
            idx = self._indexes.get(agent_id)
            if idx is not None and remote is not None and self._usable(agent_id, idx, remote):
                return idx  # loaded by the caller this one waited for
            load = self._loading[agent_id] = _Load()
            try:
                # the version as the load starts: a write whose bump comes later is either in what
                # MongoDB returns (written there before the load began) or replayed from `load`
                now = await self.stm.version(agent_id) if remote is not None else None
                loaded = await self.ltm.all_for(agent_id)
                fresh = self.new_index()
                fresh.version, fresh.loaded_at = now if now is not None else remote, time.time()
                await fresh.load_stepwise(((m, None) for m in loaded), self.ltm.on_bad_row, LOAD_STEP)
            except LTMUnavailable:
                if idx is not None:
                    return idx  # serve what we have while MongoDB is away
                raise
            finally:
                self._loading.pop(agent_id, None)
            load.replay(fresh)  # no await from here to the swap: no write can slip between
            self._indexes[agent_id] = fresh
            self.loads += 1
            return fresh

    def _usable(self, agent_id: str, idx: VersionedIndex, remote: int | None) -> bool:
        return (remote == idx.version or idx.fresh_for(remote, self._inflight.get(agent_id, 0)) or
                (remote is None and time.time() - idx.loaded_at <= INDEX_MAX_AGE_S))

    def current(self, agent_id: str) -> VersionedIndex | None:
        """The agent's index as loaded, even if a reload is due: what a recall short of time uses."""
        return self._indexes.get(agent_id)

    async def written(self, agent_id: str, put: list[StoredMemory], dropped: list[str]) -> None:
        """After a write reached both tiers: update our index (and the one loading) and bump the agent's version."""
        load = self._loading.get(agent_id)
        if load is not None:
            load.ops += [("put", m, m.embedding) for m in put] + [("drop", mid, None) for mid in dropped]
        idx = self._indexes.get(agent_id)
        if idx is not None:
            for n, m in enumerate(put):
                idx.put(m)
                if n % WRITE_STEP == WRITE_STEP - 1:
                    await asyncio.sleep(0)  # a huge turn's pieces: other agents' recalls run between
            for mid in dropped:
                idx.drop(mid)
        await self._bump(agent_id)

    async def embedded(self, agent_id: str, vectors: list[tuple[str, Any]]) -> None:
        """Vectors computed after their memories were written (and stored in MongoDB): into our
        index, and a version bump so that other processes load them too."""
        load = self._loading.get(agent_id)
        if load is not None:
            load.ops += [("vector", memory_id, vector) for memory_id, vector in vectors]
        idx = self._indexes.get(agent_id)
        if idx is not None:
            for memory_id, vector in vectors:
                idx.add_vector(memory_id, vector)
        await self._bump(agent_id)

    async def _bump(self, agent_id: str) -> None:
        self._inflight[agent_id] = self._inflight.get(agent_id, 0) + 1
        try:
            version = await self.stm.bump_version(agent_id)
        finally:
            left = self._inflight.pop(agent_id) - 1
            if left:
                self._inflight[agent_id] = left
        if version is not None:  # ours, in whichever index serves the agent now and in the one loading
            idx = self._indexes.get(agent_id)
            if idx is not None:
                idx.own.add(version)
            if (load := self._loading.get(agent_id)) is not None:
                load.own.add(version)
