"""Short-term memory in Redis: per agent, the newest N memories for fast injection.

A sorted set scored by update time holds the ids; a hash holds the JSON records. Every
operation degrades to "unavailable" instead of raising, so a Redis outage only costs speed:
the caller falls back to MongoDB and the adapter logs the state change once.
"""

from __future__ import annotations

from collections.abc import Callable

import orjson
import redis.asyncio as redis
from redis.exceptions import RedisError

from ..engine.record import StoredMemory
from .documents import from_doc, to_doc


# KEYS: the agent's id set and doc hash; ARGV: max entries, then (score, id, doc) per memory.
# Adds them, then removes what falls past the newest `max entries` from both.
_PUT = """
for i = 2, #ARGV, 3 do
  redis.call('ZADD', KEYS[1], ARGV[i], ARGV[i + 1])
  redis.call('HSET', KEYS[2], ARGV[i + 1], ARGV[i + 2])
end
local over = redis.call('ZRANGE', KEYS[1], 0, -(tonumber(ARGV[1]) + 1))
for i = 1, #over, 1000 do
  local part = {unpack(over, i, math.min(i + 999, #over))}
  redis.call('ZREM', KEYS[1], unpack(part))
  redis.call('HDEL', KEYS[2], unpack(part))
end
return #over
"""


class RedisSTM:
    def __init__(self, url: str, *, max_entries: int, prefix: str = "memplane",
                 on_state: Callable[[bool, str], None] | None = None) -> None:
        self.client = redis.Redis.from_url(url, socket_connect_timeout=0.5, socket_timeout=0.5,
                                           retry_on_timeout=False)
        self.max_entries = max_entries
        self.prefix = prefix
        self.available = True
        self._on_state = on_state
        self._put_script = self.client.register_script(_PUT)

    def _mark(self, ok: bool, error: str = "") -> None:
        if ok != self.available:
            self.available = ok
            if self._on_state:
                self._on_state(ok, error)

    def _keys(self, agent_id: str) -> tuple[str, str]:
        return f"{self.prefix}:stm:{agent_id}:ids", f"{self.prefix}:stm:{agent_id}:docs"

    def version_key(self, agent_id: str) -> str:
        return f"{self.prefix}:ver:{agent_id}"

    async def close(self) -> None:
        await self.client.aclose()

    async def put(self, memories: list[StoredMemory]) -> bool:
        """Write memories and trim each agent's set to the newest `max_entries`: one script run per
        agent (one round trip; before: a pipeline, a read of the overflow, and a pipeline removing it)."""
        if not memories:
            return True
        by_agent: dict[str, list[StoredMemory]] = {}
        for m in memories:
            by_agent.setdefault(m.agent_id, []).append(m)
        try:
            for agent_id, ms in by_agent.items():
                args: list = [self.max_entries]
                for m in ms:
                    doc = to_doc(m)
                    doc.pop("embedding", None)  # vectors stay in MongoDB and the index, not in Redis
                    args += [m.updated_at, m.id, orjson.dumps(doc, default=str)]
                await self._put_script(keys=list(self._keys(agent_id)), args=args)
            self._mark(True)
            return True
        except (RedisError, OSError) as exc:
            self._mark(False, type(exc).__name__)
            return False

    async def remove(self, agent_id: str, memory_ids: list[str]) -> None:
        if not memory_ids:
            return
        ids, docs = self._keys(agent_id)
        try:
            async with self.client.pipeline(transaction=True) as pipe:
                pipe.zrem(ids, *memory_ids)
                pipe.hdel(docs, *memory_ids)
                await pipe.execute()
            self._mark(True)
        except (RedisError, OSError) as exc:
            self._mark(False, type(exc).__name__)

    async def newest(self, agent_id: str) -> list[StoredMemory] | None:
        """The agent's cached memories, newest first; None when Redis is unreachable."""
        ids, docs = self._keys(agent_id)
        try:
            members = await self.client.zrevrange(ids, 0, self.max_entries - 1)
            raw = await self.client.hmget(docs, members) if members else []
            self._mark(True)
        except (RedisError, OSError) as exc:
            self._mark(False, type(exc).__name__)
            return None
        out = []
        for r in raw:
            try:
                out.append(from_doc(orjson.loads(r)))
            except ValueError:  # written by an older version: MongoDB, the source of truth, has it
                continue
        return out

    async def bump_version(self, agent_id: str) -> int | None:
        try:
            v = await self.client.incr(self.version_key(agent_id))
            self._mark(True)
            return int(v)
        except (RedisError, OSError) as exc:
            self._mark(False, type(exc).__name__)
            return None

    async def versions(self, agent_ids: list[str]) -> list[int | None]:
        """Several agents' versions in one round trip (a recall needs its agent's and the global one)."""
        try:
            raw = await self.client.mget([self.version_key(a) for a in agent_ids])
            self._mark(True)
            return [int(v) if v else 0 for v in raw]
        except (RedisError, OSError) as exc:
            self._mark(False, type(exc).__name__)
            return [None] * len(agent_ids)

    async def version(self, agent_id: str) -> int | None:
        return (await self.versions([agent_id]))[0]
