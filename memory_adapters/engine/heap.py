"""Keep Python's full garbage collections off the memory indexes.

Why: an agent's index is many long-lived objects (memories, their metadata, snippets, the time
order), and Python's full (generation 2) collection walks every tracked object in the process.
With ten agents' memories in a tiered service on this project's 2-core machine kind, one full
collection stopped the service for ~220 ms in the middle of the question phase: every recall in
flight went past its deadline (bench/results/HISTORY.md, "Recall in time on a busy machine").
Indexes are freed by reference counting, not by the cycle collector, so as they grow their objects
are moved out of its sight (`gc.freeze`, CPython's tool for long-lived heaps); later collections
walk only what was made since. Cyclic garbage already in the oldest generation when a freeze
comes is kept with the frozen objects: young garbage is collected first, and freezes are spaced by
FREEZE_EVERY memories indexed, so what is kept is a few requests' worth at most.
"""

from __future__ import annotations

import gc
import time
from typing import Any

FREEZE_EVERY = 500  # memories indexed between freezes (a freeze costs a young collection, ~1 ms)


class Heap:
    """Counts memories indexed, freezes every FREEZE_EVERY, and times full collections (/health)."""

    def __init__(self, every: int = FREEZE_EVERY) -> None:
        self.every = max(1, every)
        self.pending = 0
        self.freezes = 0
        self.full_collections = 0
        self.full_collection_ms_max = 0.0
        self.full_collection_ms_total = 0.0
        self._started: float | None = None
        gc.callbacks.append(self._timed)

    def indexed(self, n: int = 1) -> None:
        self.pending += n
        if self.pending >= self.every:
            self.freeze()

    def freeze(self) -> None:
        gc.collect(1)  # the young generations' garbage first: only what is alive is frozen
        gc.freeze()
        self.pending = 0
        self.freezes += 1

    def _timed(self, phase: str, info: dict[str, Any]) -> None:
        if info.get("generation") != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            ms = (time.perf_counter() - self._started) * 1000
            self.full_collections += 1
            self.full_collection_ms_max = max(self.full_collection_ms_max, round(ms, 1))
            self.full_collection_ms_total += ms
            self._started = None

    def as_dict(self) -> dict[str, Any]:
        return {"frozen_objects": gc.get_freeze_count(), "freezes": self.freezes,
                "full_collections": self.full_collections, "full_collection_ms_max": self.full_collection_ms_max,
                "full_collection_ms_total": round(self.full_collection_ms_total, 1)}


HEAP = Heap()  # one per process, as the collector is
