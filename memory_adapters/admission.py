"""Load shedding for retains: a memory service that already has as many retain calls in hand as
it takes answers the next one at once with 503 and `Retry-After`, instead of queueing it until
the proxy's write timeout (2 s) fires and the same turns are sent again on top of the queue.

Delivery honours `Retry-After` (proxy/delivery.py), and retain is idempotent by entry id, so a
shed call costs one round trip and loses nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

DEFAULT_MAX_RETAINS_IN_FLIGHT = 32  # retain calls (single or batch) a service works on at once
RETRY_AFTER_S = 1


class RetainAdmission:
    """Counts retain calls in hand; `slot()` admits one while fewer than `limit` are."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError("max retains in flight must be at least 1")
        self.limit = limit
        self.in_flight = 0

    @contextmanager
    def slot(self) -> Iterator[bool]:
        """Yields whether this call was admitted; an admitted call holds its place until it ends."""
        if self.in_flight >= self.limit:
            yield False
            return
        self.in_flight += 1
        try:
            yield True
        finally:
            self.in_flight -= 1
