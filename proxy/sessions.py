"""Inspector login sessions and the throttle on wrong admin tokens, both in memory and bounded.

A session id is random per login (never derived from the token), expires after SESSION_TTL_S
and is revoked server-side on logout; a restart logs everyone out. Wrong tokens (login form or
bearer header on an operator route) drain a per-address bucket: a few tries, then one every
REFILL_S seconds, so guessing the token from one address costs minutes per handful of tries.
"""

from __future__ import annotations

import secrets
import time
from collections import OrderedDict
from typing import Callable

SESSION_TTL_S = 12 * 3600
MAX_SESSIONS = 1_000  # the oldest login is dropped past this
FAILURES_ALLOWED = 5  # tries before the throttle answers 429
REFILL_S = 12.0  # then one more try per this many seconds (5 a minute)
MAX_CLIENTS = 10_000


class SessionStore:
    def __init__(self, ttl_s: float = SESSION_TTL_S, *, max_sessions: int = MAX_SESSIONS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._clock = clock
        self._expiry: OrderedDict[str, float] = OrderedDict()

    def create(self) -> str:
        sid = secrets.token_urlsafe(32)
        self._expiry[sid] = self._clock() + self.ttl_s
        while len(self._expiry) > self.max_sessions:
            self._expiry.popitem(last=False)
        return sid

    def valid(self, sid: str) -> bool:
        expires = self._expiry.get(sid)
        if expires is None:
            return False
        if self._clock() >= expires:
            del self._expiry[sid]
            return False
        return True

    def revoke(self, sid: str) -> None:
        self._expiry.pop(sid, None)


class FailureThrottle:
    """A token bucket per client address that only failures drain."""

    def __init__(self, allowed: int = FAILURES_ALLOWED, refill_s: float = REFILL_S, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.allowed = allowed
        self.refill_s = refill_s
        self._clock = clock
        self._buckets: dict[str, tuple[float, float]] = {}  # client -> (tries left, as of)

    def _left(self, client: str, now: float) -> float:
        left, at = self._buckets.get(client, (float(self.allowed), now))
        return min(float(self.allowed), left + (now - at) / self.refill_s)

    def blocked(self, client: str) -> float:
        """0 when the client may try, else the seconds until it may."""
        now = self._clock()
        left = self._left(client, now)
        return 0.0 if left >= 1 else (1 - left) * self.refill_s

    def fail(self, client: str) -> tuple[int, float]:
        """Count a failure: (failures within the bucket's memory, seconds until the next try)."""
        now = self._clock()
        left = max(0.0, self._left(client, now) - 1)
        if len(self._buckets) >= MAX_CLIENTS:
            self._prune(now)
        self._buckets[client] = (left, now)
        wait = 0.0 if left >= 1 else (1 - left) * self.refill_s
        return round(self.allowed - left), wait

    def _prune(self, now: float) -> None:
        for client in [c for c in self._buckets if self._left(c, now) >= self.allowed]:
            del self._buckets[client]
        while len(self._buckets) >= MAX_CLIENTS:  # all still recent: forget the oldest
            del self._buckets[min(self._buckets, key=lambda c: self._buckets[c][1])]
