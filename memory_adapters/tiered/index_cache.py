"""A byte budget over one replica's in-memory agent indexes: least recently used agents out.

A tiered replica keeps one index per agent it has served; with 100k agents that is unbounded. The
cache estimates each index's bytes from its memory count (`bytes_per_memory`, measured by
`bench/ledger_redis.py --index-model`: the engine's objects, lexical postings and, with
embeddings, the vector row) and evicts the least recently used agents past `max_bytes`. An evicted
agent is reloaded from MongoDB on its next call: a budget too small costs latency, never memories.
`max_bytes` 0 = unbounded (the default, as before).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

BYTES_PER_MEMORY = 4_200  # measured without vectors, 240-character memories (bench/ledger_redis.py --index-model): 4,172
BYTES_PER_DIM = 4  # float32 per vector dimension


class IndexCache:
    """agent id -> index, bounded by estimated bytes, LRU order (a get counts as a use)."""

    def __init__(self, max_bytes: int = 0, *, bytes_per_memory: int = BYTES_PER_MEMORY) -> None:
        self.max_bytes = max_bytes
        self.bytes_per_memory = bytes_per_memory
        self._items: OrderedDict[str, Any] = OrderedDict()
        self._sizes: dict[str, int] = {}
        self.total = 0  # estimated bytes held
        self.evictions = 0

    def estimate(self, idx: Any) -> int:
        per = self.bytes_per_memory
        vectors = getattr(idx, "vectors", None)
        if vectors is not None:
            per += BYTES_PER_DIM * int(getattr(vectors, "dim", 0) or 0)
        return 1024 + per * len(idx)

    def get(self, agent_id: str) -> Any:
        idx = self._items.get(agent_id)
        if idx is not None:
            self._items.move_to_end(agent_id)
            self._resize(agent_id, idx)  # it may have grown by writes since
        return idx

    def __setitem__(self, agent_id: str, idx: Any) -> None:
        self._items[agent_id] = idx
        self._items.move_to_end(agent_id)
        self._resize(agent_id, idx)

    def _resize(self, agent_id: str, idx: Any) -> None:
        size = self.estimate(idx)
        self.total += size - self._sizes.get(agent_id, 0)
        self._sizes[agent_id] = size
        if self.max_bytes:
            while self.total > self.max_bytes and len(self._items) > 1:
                oldest = next(iter(self._items))
                if oldest == agent_id:  # the agent in use stays, even alone over budget
                    break
                self._items.pop(oldest)
                self.total -= self._sizes.pop(oldest, 0)
                self.evictions += 1

    def values(self) -> Iterator[Any]:
        return iter(list(self._items.values()))

    def __contains__(self, agent_id: object) -> bool:
        return agent_id in self._items

    def __len__(self) -> int:
        return len(self._items)
