"""What proxies must share besides the ledger: per-agent rate limits, per-turn explanations and the
per-turn block memory, on the same Redis as the shared ledger (`--ledger redis`).

* Rate limit: one token bucket per agent, refilled and spent by one Lua script on Redis's clock, so
  N proxies together allow what one would. Redis away: the call is allowed and a warning logged
  (the limit protects the provider bill; refusing every turn would break every agent).
* Explanations, turn blocks and Anthropic message threads: written through to Redis with a TTL by one writer task per proxy (in
  order, off the turn's path); read locally first, then from Redis, so any replica answers
  `/memplane/turns/{id}` and continues a tool loop another replica started. A Redis miss or error is
  what a local miss already was: no explanation / one more recall.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
from typing import Any

import orjson
import redis
import redis.asyncio as aredis

from memplane_core.telemetry import Telemetry

from ..operator.explain import TurnExplanations
from ..recall_policy import InjectedMemory
from ..threads import TTL_S as THREAD_TTL_S
from ..threads import Pending, Thread, Threads
from ..turn_blocks import TTL_S, TurnBlock, TurnBlocks

EXPLANATION_TTL_S = 24 * 3600

# KEYS: bucket. ARGV: rate per second, burst. Returns the seconds to wait ("0" = go).
_BUCKET = """
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local b = redis.call('HMGET', KEYS[1], 'tokens', 'ts')
local tokens = tonumber(b[1]) or burst
local ts = tonumber(b[2]) or now
tokens = math.min(burst, tokens + math.max(0, now - ts) * rate)
local wait = 0
if tokens >= 1 then tokens = tokens - 1 else wait = (1 - tokens) / rate end
redis.call('HSET', KEYS[1], 'tokens', tostring(tokens), 'ts', tostring(now))
redis.call('PEXPIRE', KEYS[1], math.ceil(burst / rate * 1000) + 1000)
return tostring(wait)
"""


class RedisRateLimiter:
    """Per-agent token buckets shared by every proxy on one Redis."""

    def __init__(self, client: aredis.Redis, rate_per_s: float, burst: int, telemetry: Telemetry,
                 prefix: str = "memplane") -> None:
        self.rate = rate_per_s
        self.burst = max(1, burst)
        self.telemetry = telemetry
        self.prefix = prefix
        self._script = client.register_script(_BUCKET)

    async def check(self, agent_id: str) -> float:
        if self.rate <= 0:
            return 0.0
        try:
            wait = await self._script(keys=[f"{self.prefix}:ratelimit:{agent_id}"], args=[self.rate, self.burst])
        except redis.RedisError as exc:
            self.telemetry.warning("rate_limit_unavailable", agent_id=agent_id, error=type(exc).__name__,
                                   detail="Redis is away: the call is allowed")
            return 0.0
        return float(wait)


class _Writer:
    """One task that writes keys in the order they were first set, so an update never lands before
    its record. A key set again before it was written is written once, with its last value (a
    turn's explanation is recorded, then updated when the ledger has the turn: usually one SET, not
    two), and what is waiting goes out in one pipelined round trip (a busy proxy's turns share them)."""

    BATCH = 256  # keys a round trip carries at most

    def __init__(self, client: aredis.Redis, telemetry: Telemetry, max_queued: int = 10_000) -> None:
        self.client = client
        self.telemetry = telemetry
        self.max_queued = max_queued
        self.pending: dict[str, tuple[bytes | None, int]] = {}  # in first-set order, the last value
        self.writing = False
        self._wake = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.round_trips = 0

    def put(self, key: str, value: bytes | None, ttl_s: float) -> None:
        """Set `key` (or delete it: `value` None), in order with every other write."""
        if self.task is None:
            self.task = asyncio.get_running_loop().create_task(self._run())
        if key not in self.pending and len(self.pending) >= self.max_queued:
            # Redis is behind: the local copy still answers on this replica
            self.telemetry.warning("shared_state_dropped", key=key.rsplit(":", 2)[-2])
            return
        self.pending[key] = (value, max(1, int(ttl_s)))
        self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            while self.pending:
                keys = list(itertools.islice(self.pending, self.BATCH))
                batch = [(k, self.pending.pop(k)) for k in keys]
                pipe = self.client.pipeline(transaction=False)
                for key, (value, ttl) in batch:  # the commands themselves: `pipe.set`'s argument checks
                    if value is None:              # cost more than the write
                        pipe.execute_command("DEL", key)
                    else:
                        pipe.execute_command("SET", key, value, "EX", ttl)
                self.writing = True
                try:
                    await pipe.execute()
                except redis.RedisError as exc:
                    self.telemetry.warning("shared_state_not_written", error=type(exc).__name__)
                finally:
                    self.writing = False
                    self.round_trips += 1

    async def drain(self, timeout: float = 2.0) -> None:
        deadline = asyncio.get_running_loop().time() + timeout
        while (self.pending or self.writing) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.005)
        if self.task is not None:
            self.task.cancel()


class RedisExplanations(TurnExplanations):
    """Explanations kept locally as before and written through to Redis (TTL a day)."""

    def __init__(self, writer: _Writer, prefix: str = "memplane", ttl_s: float = EXPLANATION_TTL_S) -> None:
        super().__init__()
        self.writer = writer
        self.prefix = prefix
        self.ttl_s = ttl_s

    def _key(self, turn_id: str) -> str:
        return f"{self.prefix}:turn:{turn_id}"

    def record(self, turn_id: str, doc: dict[str, Any]) -> None:
        super().record(turn_id, doc)
        self.writer.put(self._key(turn_id), orjson.dumps(doc, default=str), self.ttl_s)

    def update(self, turn_id: str, **fields: Any) -> None:
        super().update(turn_id, **fields)
        doc = self.get(turn_id)
        if doc is not None:
            self.writer.put(self._key(turn_id), orjson.dumps(doc, default=str), self.ttl_s)

    async def fetch(self, turn_id: str) -> dict[str, Any] | None:
        """The explanation, from this replica or else from Redis (kept here afterwards)."""
        doc = self.get(turn_id)
        if doc is not None:
            return doc
        try:
            raw = await self.writer.client.get(self._key(turn_id))
            doc = orjson.loads(raw) if raw else None
        except (redis.RedisError, orjson.JSONDecodeError):
            return None
        if isinstance(doc, dict):
            super().record(turn_id, doc)
        return doc


def _encode_block(turn: TurnBlock) -> bytes:
    return orjson.dumps(dataclasses.asdict(turn), default=str)


def _decode_block(raw: bytes) -> TurnBlock | None:
    try:
        d = orjson.loads(raw)
        return TurnBlock(d["block"], tuple(InjectedMemory(**m) for m in d["memories"]), d["placement"],
                         d.get("note"), d["question"], d.get("detail") or {},
                         loop=d.get("loop") if isinstance(d.get("loop"), str) else None)
    except (orjson.JSONDecodeError, KeyError, TypeError):
        return None


class RedisTurnBlocks(TurnBlocks):
    """Turn blocks kept locally as before and written through to Redis with the same TTL."""

    def __init__(self, writer: _Writer, prefix: str = "memplane", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.writer = writer
        self.prefix = prefix

    def put(self, key: str | None, turn: TurnBlock) -> None:
        super().put(key, turn)
        if key:
            self.writer.put(f"{self.prefix}:turnblock:{key}", _encode_block(turn), TTL_S)

    async def fetch(self, key: str | None) -> TurnBlock | None:
        turn = self.get(key)
        if turn is not None or not key:
            return turn
        try:
            raw = await self.writer.client.get(f"{self.prefix}:turnblock:{key}")
        except redis.RedisError:
            return None
        turn = _decode_block(raw) if raw else None
        if turn is not None:
            super().put(key, turn)
        return turn


class RedisThreads(Threads):
    """Anthropic message threads kept locally as before and written through to Redis (an hour), so a
    `continue` reaches whichever proxy the balancer picks."""

    def __init__(self, writer: _Writer, prefix: str = "memplane", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.writer = writer
        self.prefix = prefix

    def _key(self, agent_id: str, message_id: str) -> str:
        import hashlib

        return f"{self.prefix}:thread:" + hashlib.sha256(orjson.dumps([agent_id, message_id])).hexdigest()

    async def prefetch(self, agent_id: str, body: dict[str, Any]) -> None:
        thread = body.get("thread")
        previous = thread.get("previous_message_id") if isinstance(thread, dict) else None
        if not isinstance(previous, str) or (agent_id, previous) in self._threads:
            return
        try:
            raw = await self.writer.client.get(self._key(agent_id, previous))
            doc = orjson.loads(raw) if raw else None
            if isinstance(doc, dict):
                self._threads[(agent_id, previous)] = Thread(doc["fields"], doc["messages"], int(doc["size"]))
        except (redis.RedisError, orjson.JSONDecodeError, KeyError, TypeError, ValueError):
            return  # as a local miss: the client is told the thread is gone and replays it

    def record(self, agent_id: str, pending: Pending | None, message_id: Any, content: Any) -> None:
        super().record(agent_id, pending, message_id, content)
        if pending is not None and pending.previous is not None:
            self.writer.put(self._key(*pending.previous), None, 1)  # a reply is continued once
        held = self._threads.get((agent_id, message_id)) if isinstance(message_id, str) else None
        if held is not None:
            self.writer.put(self._key(agent_id, message_id),
                            orjson.dumps({"fields": held.fields, "messages": held.messages, "size": held.size},
                                         default=str), THREAD_TTL_S)


def shared_writer(client: aredis.Redis, telemetry: Telemetry) -> _Writer:
    return _Writer(client, telemetry)
