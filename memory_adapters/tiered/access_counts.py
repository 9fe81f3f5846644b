"""How often each memory was recalled: counted in memory at once, written to MongoDB at most
once a second (a write per recall would put MongoDB on the hot path)."""

from __future__ import annotations

import asyncio
import time

from ..engine.record import StoredMemory
from .ltm import MongoLTM

FLUSH_EVERY_S = 1.0


class AccessCounts:
    def __init__(self, ltm: MongoLTM) -> None:
        self.ltm = ltm
        self._pending: dict[str, int] = {}  # recalls not yet counted in MongoDB
        self._flusher: asyncio.Future | None = None

    def recalled(self, memories: list[StoredMemory]) -> None:
        now = time.time()
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
            await self.ltm.bump_access(pending, time.time())

    async def close(self) -> None:
        if self._flusher is not None:
            self._flusher.cancel()
        await self.flush()
