"""The shared ledger on Redis Streams, for more than one proxy (`--ledger redis`).

One stream per agent holds its entries (`<prefix>:ledger:<agent>`, field `e` = the entry's JSON,
byte for byte what the file ledger writes); a few sharded retain queues (`<prefix>:retain:<n>`,
the agent's shard by hash) hold one reference per entry for the retain consumer group
(`proxy/retain/delivery_redis.py`). Both are written by one Lua script, so an entry for retain is in
the ledger if and only if it is queued, and both share one stream id (ids in one shard grow, an
agent lives in one shard). An entry of an agent without a retain endpoint is ledgered only (with an
id of its own stream), as the file ledger hands retain nothing for it.
Entry ids stay the `hist1_…` content hashes: a retain delivered twice is still one memory.

Tombstones (a hash per agent) and dead letters (one stream, plus a set of ids per agent) live beside
them, so `forget`, `backfill`, `audit` and `ledger export` read the same ledger from any replica.
Redis must persist with AOF (see docs/operating.md, "Running more than one proxy").
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import redis
import redis.asyncio as aredis

from memplane_core.clock import now_rfc3339

from ..errors import ProxyError
from .entry import LedgerEntry
from .files import LineRef
from .redis_group import GroupCommit
from .redis_packing import pack_in_c

SHARDS = 8
GROUP = "retain"
PAGE = 500

# KEYS: queue, ledger, agents set. ARGV: agent id, entry JSON, "0" when the entry is not for retain
# (its agent has no retain endpoint: nothing to queue, as the file ledger hands retain nothing).
# The ledger XADD reuses the queue's id; should the agent's stream already be past it (shard count
# changed), it takes its own id and the queue entry names it (`l`).
_APPEND = """
if ARGV[3] == '0' then
  local own = redis.call('XADD', KEYS[2], '*', 'e', ARGV[2])
  redis.call('SADD', KEYS[3], ARGV[1])
  return own
end
local id = redis.call('XADD', KEYS[1], '*', 'a', ARGV[1])
local ok = pcall(redis.call, 'XADD', KEYS[2], id, 'e', ARGV[2])
if not ok then
  redis.call('XDEL', KEYS[1], id)
  local own = redis.call('XADD', KEYS[2], '*', 'e', ARGV[2])
  id = redis.call('XADD', KEYS[1], '*', 'a', ARGV[1], 'l', own)
  redis.call('SADD', KEYS[3], ARGV[1])
  return own
end
redis.call('SADD', KEYS[3], ARGV[1])
return id
"""


class Keys:
    """Every Redis key the shared ledger uses, under one prefix."""

    def __init__(self, prefix: str = "memplane") -> None:
        self.prefix = prefix

    def ledger(self, agent_id: str) -> str:
        return f"{self.prefix}:ledger:{agent_id}"

    def agents(self) -> str:
        return f"{self.prefix}:ledger:agents"

    def shard(self, agent_id: str) -> int:
        return zlib.crc32(agent_id.encode()) % SHARDS

    def queue(self, shard: int) -> str:
        return f"{self.prefix}:retain:{shard}"

    def queues(self) -> list[str]:
        return [self.queue(i) for i in range(SHARDS)]

    def tombstones(self, agent_id: str) -> str:
        return f"{self.prefix}:tombstones:{agent_id}"

    def dead(self) -> str:
        return f"{self.prefix}:retain:dead"

    def dead_ids(self, agent_id: str) -> str:
        return f"{self.prefix}:retain:dead:{agent_id}"

    def stats(self) -> str:
        return f"{self.prefix}:retain:stats"


def _s(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class RedisLedger:
    """The ledger API the proxy and the operator commands use, on Redis Streams.

    `append` is async (the proxy's hot path); reads are sync (operator commands, the inspector).
    Spans are stream ids instead of byte offsets."""

    kind = "redis"

    def __init__(self, url: str, root: Path, *, prefix: str = "memplane") -> None:
        self.url = url
        self.root = Path(root)  # nothing is written here; kept for callers that name files beside it
        self.keys = Keys(prefix)
        self.sync = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=2)
        self._async: aredis.Redis | None = None
        self._group = GroupCommit(lambda: self.aio, _APPEND, 3)  # appends share round trips

    @property
    def aio(self) -> aredis.Redis:
        if self._async is None:  # made on first use, inside the event loop that uses it
            self._async = pack_in_c(aredis.Redis.from_url(self.url, socket_timeout=5, socket_connect_timeout=2))
        return self._async

    async def ready(self, agent_id: str) -> None:
        """Nothing to open: a Redis that is away is the append's 503."""

    async def append(self, agent_id: str, entry: LedgerEntry, line: bytes | None = None, *,
                     retain: bool = True) -> tuple[str, str]:
        """Ledger and queue one entry atomically (`line`: its JSON, when the caller has it); (id, id).
        `retain` False: ledgered only (the agent has no retain endpoint: a queued reference would
        be read and acknowledged for nothing). Redis away: 503, the turn is not answered unrecorded
        (every model call is a recorded turn)."""
        line = orjson.dumps(entry) if line is None else line
        k = self.keys
        try:
            sid = await self._group.run(k.queue(k.shard(agent_id)), k.ledger(agent_id), k.agents(), agent_id, line,
                                        b"1" if retain else b"0")
        except redis.RedisError as exc:
            raise ProxyError(503, f"The shared ledger is unavailable ({type(exc).__name__}); retry later.",
                             code="ledger_unavailable", headers={"Retry-After": "1"}) from None
        sid = _s(sid)
        return sid, sid

    def append_blocking(self, agent_id: str, entry: LedgerEntry) -> tuple[str, str]:
        k = self.keys
        sid = _s(self.sync.eval(_APPEND, 3, k.queue(k.shard(agent_id)), k.ledger(agent_id), k.agents(),
                                agent_id, orjson.dumps(entry), b"1"))
        return sid, sid

    def size(self, agent_id: str) -> int:
        return int(self.sync.xlen(self.keys.ledger(agent_id)))

    def agents(self) -> list[str]:
        return sorted(_s(a) for a in self.sync.smembers(self.keys.agents()))

    def read(self, agent_id: str, *, start_offset: Any = 0, on_torn=None) -> Iterator[LineRef]:
        """Every entry from `start_offset` (a stream id, or 0) on, in order, a page at a time."""
        key = self.keys.ledger(agent_id)
        start = "-" if not start_offset else str(start_offset)
        while True:
            page = self.sync.xrange(key, min=start, max="+", count=PAGE)
            for sid, fields in page:
                try:
                    yield LineRef(0, 0, orjson.loads(fields[b"e"]))
                except (KeyError, orjson.JSONDecodeError):
                    if on_torn:
                        on_torn(1)
            if len(page) < PAGE:
                return
            start = "(" + _s(page[-1][0])

    def seek_offset(self, agent_id: str, after: str) -> Any:
        """A stream id at or before the first entry whose ts is after `after` (ids are Redis's clock
        in ms; a minute of slack covers a proxy's clock skew)."""
        from datetime import datetime, timedelta

        try:
            when = datetime.fromisoformat(after.replace("Z", "+00:00")) - timedelta(minutes=1)
        except ValueError:
            return 0
        return max(0, int(when.timestamp() * 1000))

    async def run(self, fn, *args):
        return fn(*args)

    def close(self) -> None:
        """Close the sync client; the async one closes its connections with its event loop."""
        self.sync.close()

    # -- tombstones and dead letters --

    def tombstones(self, agent_id: str) -> set[str]:
        return {_s(k) for k in self.sync.hkeys(self.keys.tombstones(agent_id))}

    def add_tombstones(self, agent_id: str, entry_ids: list[str], reason: str) -> None:
        ts = now_rfc3339()
        if entry_ids:
            self.sync.hset(self.keys.tombstones(agent_id),
                           mapping={e: orjson.dumps({"reason": reason, "ts": ts}) for e in entry_ids})

    def dead_letters(self, agent_id: str) -> set[str]:
        return {_s(k) for k in self.sync.smembers(self.keys.dead_ids(agent_id))}

    def has_agent(self, agent_id: str) -> bool:
        return bool(self.sync.sismember(self.keys.agents(), agent_id))


def open_ledger(history_root: Path, *, kind: str | None = None, redis_url: str | None = None,
                prefix: str | None = None):
    """The ledger the settings name: the file ledger (default), or the shared one on Redis
    (`MEMPLANE_LEDGER=redis`, `MEMPLANE_REDIS_URL`, `MEMPLANE_LEDGER_PREFIX`)."""
    import os

    from .files import Ledger

    kind = kind or os.environ.get("MEMPLANE_LEDGER", "file")
    if kind == "file":
        return Ledger(history_root)
    if kind != "redis":
        raise ValueError(f"unknown ledger {kind!r} (file or redis)")
    url = redis_url or os.environ.get("MEMPLANE_REDIS_URL") or "redis://127.0.0.1:6379/0"
    return RedisLedger(url, history_root, prefix=prefix or os.environ.get("MEMPLANE_LEDGER_PREFIX", "memplane"))
