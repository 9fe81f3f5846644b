"""Per-agent token-bucket rate limiting: a flood from one agent never starves the others."""

from __future__ import annotations

import math
import time


class RateLimiter:
    def __init__(self, rate_per_s: float, burst: int) -> None:
        self.rate = rate_per_s
        self.burst = max(1, burst)
        self._buckets: dict[str, tuple[float, float]] = {}

    def acquire(self, agent_id: str) -> float:
        """0 when the call may proceed, else the seconds to wait before retrying."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic()
        tokens, last = self._buckets.get(agent_id, (float(self.burst), now))
        tokens = min(self.burst, tokens + (now - last) * self.rate)
        if tokens >= 1:
            self._buckets[agent_id] = (tokens - 1, now)
            return 0.0
        self._buckets[agent_id] = (tokens, now)
        return (1 - tokens) / self.rate


    async def check(self, agent_id: str) -> float:
        """`acquire`, for callers that also serve the shared limiter (`shared_state.RedisRateLimiter`)."""
        return self.acquire(agent_id)


def retry_after_header(wait_s: float) -> str:
    return str(max(1, math.ceil(wait_s)))
