"""One agent's retain lane: where its next entries come from.

New turns reach the lane in memory (the fast path). When the shared buffer is full, when
something was not buffered, or after a restart, the lane reads the ledger from its cursor
instead, so memory stays bounded and nothing ledgered is skipped.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from ..ledger.entry import LedgerEntry
from ..ledger.files import Ledger

Item = tuple[int, int, LedgerEntry]  # (start offset, end offset, ledger entry)


class BufferBudget:
    """How many entries all lanes together may hold in memory."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    def full(self) -> bool:
        return self.used >= self.limit


@dataclass
class Lane:
    agent_id: str
    budget: BufferBudget
    cursor: int = 0  # everything before this ledger offset was acknowledged
    pending: deque[Item] = field(default_factory=deque)  # in ledger order
    from_file: bool = False  # read the ledger from the cursor instead of the buffer
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    state: str = "idle"  # idle | busy | backoff
    failures: int = 0
    task: asyncio.Task | None = None
    saved: int = -1  # cursor value last written to disk
    saved_at: float = 0.0
    flush: asyncio.TimerHandle | None = None  # a pending deferred cursor save
    retry_after: float = 0.0  # seconds a busy service asked us to wait (Retry-After)
    last_error: str = ""  # why the last attempt failed

    def offer(self, item: Item) -> None:
        """Buffer a freshly ledgered entry, or fall back to the ledger when the budget is spent."""
        if self.from_file or self.budget.full():
            self.from_file = True  # the ledger has it; the lane will read it from there
            self.drop_buffer()
        else:
            self.pending.append(item)
            self.budget.used += 1
        self.wake.set()

    def drop_buffer(self) -> None:
        self.budget.used -= len(self.pending)
        self.pending.clear()

    def idle(self) -> bool:
        return self.state != "busy" and (self.state == "backoff" or (not self.pending and not self.wake.is_set()))

    async def next_items(self, ledger: Ledger, limit: int, on_torn: Callable[[], None]) -> list[Item]:
        """Up to `limit` entries after the cursor, from the buffer or else the ledger file."""
        while self.pending and self.pending[0][0] < self.cursor:
            self.pending.popleft()  # already delivered (read from the file earlier)
            self.budget.used -= 1
        if not self.from_file and self.pending and self.pending[0][0] > self.cursor:
            self.from_file = True  # a gap: something was not buffered; the ledger has it
        if self.from_file:
            return await self._read_ledger(ledger, limit, on_torn)
        items = []
        while self.pending and len(items) < limit:
            items.append(self.pending.popleft())
            self.budget.used -= 1
        return items

    async def _read_ledger(self, ledger: Ledger, limit: int, on_torn: Callable[[], None]) -> list[Item]:
        self.drop_buffer()
        torn: list[int] = []
        start = self.cursor

        def read() -> list[Item]:
            out = []
            for ref in ledger.read(self.agent_id, start_offset=start, on_torn=torn.append):
                out.append((ref.offset, ref.end, ref.entry))
                if len(out) >= limit:
                    break
            return out

        items = await ledger.run(read)
        if torn:
            on_torn()
        if not items and self.cursor >= ledger.size(self.agent_id):
            self.from_file = False  # caught up with the file: back to the fast path
        return items
