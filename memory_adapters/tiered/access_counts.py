"""How often each memory was recalled: counted in memory at once, written to MongoDB at most
once every FLUSH_EVERY_S (a write per recall would put MongoDB on the hot path).

Why 5 s and not 1: a recall picks some 65 memories (its blocks and their neighbours), and while a
conversation goes on the same ones come back turn after turn. Counted over 1 s, a fed turn still
cost about ten updates (14,500 for 1,450 turns, bench.busy), each rewriting a whole document,
vector included — the store's largest cost per turn. The counts are a ranking hint for pruning
(record.composite_importance), read from MongoDB only by consolidation; a few seconds more before
they land changes nothing there, and the process's own index counts at once."""

from __future__ import annotations

import asyncio
import time

from ..engine.record import StoredMemory
from .ltm import MongoLTM

FLUSH_EVERY_S = 5.0


class AccessCounts:
    def __init__(self, ltm: MongoLTM) -> None:
        self.ltm = ltm
        self._pending: dict[str, int] = {}  # recalls not yet counted in MongoDB
        self._flusher: asyncio.Future | None = None
        self.counted = 0  # memories recalled (each time)
        self.written = 0  # counts written to MongoDB (one per memory per flush)

    def recalled(self, memories: list[StoredMemory]) -> None:
        now = time.time()
        self.counted += len(memories)
        for m in memories:
            m.access_count += 1
            m.last_accessed_at = now
            self._pending[m.id] = self._pending.get(m.id, 0) + 1
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.ensure_future(self.flush(delay=FLUSH_EVERY_S))

    async def flush(self, delay: float = 0.0) -> None:
        if delay:
            await asyncio.sleep(delay)
        pending, self._pending = self._pending, {}
        if pending:
            self.written += len(pending)
            await self.ltm.bump_access(pending, time.time())

    async def close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
        await self.flush()
