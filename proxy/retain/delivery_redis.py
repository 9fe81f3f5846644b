"""At-least-once retain delivery from the shared ledger, through a Redis consumer group.

Every proxy is one consumer of the group `retain` on each sharded queue (`proxy/ledger/redis_streams.py`). A
consumer reads new references (`XREADGROUP >`), fetches their entries from the agents' ledger
streams, sends them with the same `RetainSender` the file ledger uses, and acknowledges (`XACK`,
then `XDEL`: the ledger keeps the entry, the queue only the work) only what the memory service
accepted or refused for good. What fails stays pending; an entry left pending longer than
`claim_idle_s` — its consumer died — is claimed by whichever live proxy looks next (`XPENDING … IDLE`
then `XCLAIM` with the same min-idle: `XAUTOCLAIM`'s guarantee, plus the previous owner's name, so a
proxy's own lost retries are not counted as repeats), and sent again: the memory service dedupes by entry id. A live consumer retries what failed itself,
with backoff, and keeps those entries its own meanwhile (`XCLAIM` resets their idle time), so only a
dead consumer's entries move. Each claim counts as a possible repeat delivery (`<prefix>:retain:stats`, field `reclaimed`). An entry that
cannot be sent at all is parked in the dead-letter stream for `memplane memory backfill
--dead-letters`.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
import uuid
from collections import defaultdict
from typing import Any

import aiohttp
import orjson
import redis

from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry

from ..context_store import ContextStore
from ..ledger.entry import LedgerEntry
from ..ledger.redis_streams import GROUP, RedisLedger, _s
from .backlog import Backlog
from .lane import BufferBudget, Lane
from .sender import RetainSender

DEFAULT_CLAIM_IDLE_S = 30.0


class _StreamSender(RetainSender):
    """Dead letters go to the shared stream (written by the consumer loop before it acknowledges)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.parked: list[tuple[str, str | None, str]] = []

    def _park(self, agent_id: str, entry_id: str | None, reason: str) -> None:
        self.parked.append((agent_id, entry_id, reason[:500]))  # written to Redis by the consumer


class StreamRetainDelivery:
    """The proxy's retain delivery when the ledger is shared (same questions answered as
    `delivery.RetainDelivery`)."""

    def __init__(self, session: aiohttp.ClientSession, telemetry: Telemetry, redactor: Redactor,
                 ledger: RedisLedger, contexts: ContextStore, *, claim_idle_s: float = DEFAULT_CLAIM_IDLE_S,
                 batch: int = 32, max_in_flight: int = 16, consumer: str | None = None,
                 linger_s: float = 0.02) -> None:
        self.telemetry = telemetry
        self.ledger = ledger
        self.contexts = contexts
        self.keys = ledger.keys
        self.sender = _StreamSender(session, telemetry, redactor, ledger.root, max_in_flight=max_in_flight)
        self.claim_idle_s = claim_idle_s
        self.batch = batch
        # after a read that took less than a whole batch, the next waits this long: under load the
        # entries of a few turns share one read and one acknowledgement (as the file ledger's lanes
        # linger), instead of a read and an acknowledgement per turn
        self.linger_s = linger_s
        self.consumer = consumer or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        self.lanes: dict[str, Lane] = {}  # per-agent retry state the sender reads (Retry-After, last error)
        self._budget = BufferBudget(0)
        self._closing = False
        self._task: asyncio.Task | None = None
        self._busy = False
        self.backlog = Backlog()  # what this proxy ledgered since start and is not yet settled
        self.reclaimed = 0  # entries this consumer claimed from a dead one
        # entries whose delivery failed, retried by this consumer: (queue, id) -> (agent, ledger id, attempts, due)
        # (ids are per stream: two queues can hold the same id)
        self._retry: dict[tuple[str, str], tuple[str, str, int, float]] = {}
        self._held: dict[str, set[str]] = defaultdict(set)  # queue -> ids being delivered right now
        self._keeper: asyncio.Task | None = None
        self.on_close: Any = None  # awaited on close (scale.py: flush the explanations' write-through)

    # -- lifecycle --

    async def start(self) -> None:
        for q in self.keys.queues():
            try:
                await self.ledger.aio.xgroup_create(q, GROUP, id="0", mkstream=True)
            except redis.ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
            except redis.RedisError as exc:  # Redis away at start: the loop keeps trying
                self.telemetry.warning("retain_group_not_created", queue=q, error=type(exc).__name__)
        self._task = asyncio.create_task(self._loop())
        self._keeper = asyncio.create_task(self._keep())

    async def close(self, grace_s: float) -> None:
        """Stop reading; what is unacknowledged stays pending for another proxy (or this one, restarted)."""
        self._closing = True
        deadline = time.monotonic() + grace_s
        while self._busy and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for task in (self._task, self._keeper):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        if self.on_close is not None:
            await self.on_close()

    # -- what the turn path and the operator views call --

    def prepare(self, agent_id: str) -> None:
        """Nothing to do: the ledger append queues the entry in the same script."""

    def submit(self, agent_id: str, start: Any, end: Any, entry: LedgerEntry) -> None:
        self.backlog.add(agent_id)

    @property
    def dead_letters(self) -> int:
        return self.sender.dead_letters

    def idle(self) -> bool:
        """Nothing is being delivered by this proxy right now and its queues hold nothing for it."""
        if self._busy:
            return False
        try:
            pipe = self.ledger.sync.pipeline()
            for q in self.keys.queues():
                pipe.xinfo_groups(q)
            for groups in pipe.execute():
                for g in groups:
                    if _s(g["name"]) == GROUP and (g.get("pending") or (g.get("lag") or 0)):
                        return False
        except redis.RedisError:
            return True
        return True

    def entry_state(self, agent_id: str, entry_id: str, sid: Any) -> str:
        """pending | delivered | dead-lettered | not retained, from the shared queue (any proxy)."""
        try:
            if self.ledger.sync.sismember(self.keys.dead_ids(agent_id), entry_id):
                return "dead-lettered"
            q = self.keys.queue(self.keys.shard(agent_id))
            sid = str(sid)
            if self.ledger.sync.xpending_range(q, GROUP, min=sid, max=sid, count=1):
                return "pending (being delivered)"
            last = next((_s(g["last-delivered-id"]) for g in self.ledger.sync.xinfo_groups(q)
                         if _s(g["name"]) == GROUP), "0-0")
        except redis.RedisError as exc:
            return f"unknown (Redis: {type(exc).__name__})"
        return "pending" if _id_tuple(sid) > _id_tuple(last) else "delivered"

    # -- the consumer loop --

    async def _loop(self) -> None:
        r = self.ledger.aio
        last_claim = 0.0
        failures = 0
        while not self._closing:
            try:
                if time.monotonic() - last_claim >= min(1.0, self.claim_idle_s / 4):
                    last_claim = time.monotonic()
                    await self._retry_due()
                    await self._claim()
                # a few per queue: what one proxy holds unacknowledged at once (and so what its death
                # can make another deliver again) stays at about `batch` entries
                count = max(1, self.batch // len(self.keys.queues()))
                got = await r.xreadgroup(GROUP, self.consumer, {q: ">" for q in self.keys.queues()},
                                         count=count, block=200)
                for queue, messages in got or []:
                    self._held[_s(queue)] |= {_s(qid) for qid, _ in messages}
                for queue, messages in got or []:
                    await self._deliver(_s(queue), messages)
                failures = 0
                if got and all(len(messages) < count for _, messages in got):
                    await asyncio.sleep(self.linger_s)
            except asyncio.CancelledError:
                raise
            except redis.ResponseError as exc:
                if "NOGROUP" in str(exc):  # the queues were deleted (Redis flushed): make them again
                    await self._recreate_groups()
                await self._pause(failures := failures + 1, exc)
            except Exception as exc:
                await self._pause(failures := failures + 1, exc)

    async def _recreate_groups(self) -> None:
        for q in self.keys.queues():
            try:
                await self.ledger.aio.xgroup_create(q, GROUP, id="0", mkstream=True)
            except redis.RedisError:
                pass

    async def _pause(self, failures: int, exc: Exception) -> None:
        # what this read held and did not get to stays pending, ours but untracked: the claim pass
        # takes it up again after the idle time (not counted as a repeat)
        self._held.clear()
        self._busy = False
        self.telemetry.warning("retain_stream_error", error=f"{type(exc).__name__}: {exc}"[:300],
                               consumer=self.consumer)
        await asyncio.sleep(min(5.0, 0.1 * 2 ** min(failures, 6)))

    async def _claim(self) -> None:
        """Take over entries idle past `claim_idle_s`: their consumer died (a live one keeps its own
        fresh). `XPENDING … IDLE` names the idle entries and their owners; `XCLAIM` with the same
        min-idle takes them, so two proxies never both take one."""
        r = self.ledger.aio
        idle_ms = int(self.claim_idle_s * 1000)
        for q in self.keys.queues():
            idle = await r.xpending_range(q, GROUP, min="-", max="+", count=200, idle=idle_ms)
            if not idle:
                continue
            mine = self._held[q] | {qid for queue, qid in self._retry if queue == q}
            ids = [_s(p["message_id"]) for p in idle if _s(p["message_id"]) not in mine]
            if not ids:
                continue
            others = {_s(p["message_id"]): _s(p["consumer"]) for p in idle
                      if _s(p["message_id"]) in ids and _s(p["consumer"]) != self.consumer}
            taken = [(_s(mid), f) for mid, f in await r.xclaim(q, GROUP, self.consumer, idle_ms, ids) if f]
            moved = [m for m in taken if m[0] in others]  # ours but untracked (a lost retry) is no repeat
            if moved:
                self.reclaimed += len(moved)
                await r.hincrby(self.keys.stats(), "reclaimed", len(moved))
                self.telemetry.info("retain_claimed", queue=q, entries=len(moved), consumer=self.consumer,
                                    from_consumers=sorted(set(others.values()))[:5], idle_s=self.claim_idle_s,
                                    idle_ms_max=max(p["time_since_delivered"] for p in idle))
            if taken:
                await self._deliver(q, taken)

    async def _deliver(self, queue: str, messages: list) -> None:
        """Send one read's entries (per agent, concurrently) and acknowledge what is settled."""
        if not messages:
            return
        self._busy = True
        held = {_s(qid) for qid, _ in messages}
        self._held[queue] |= held
        try:
            by_agent: dict[str, list[tuple[str, str]]] = defaultdict(list)
            settled: list[str] = []
            for qid, fields in messages:
                qid = _s(qid)
                if not fields or b"a" not in fields:  # deleted meanwhile (another consumer settled it)
                    settled.append(qid)
                    continue
                by_agent[_s(fields[b"a"])].append((qid, _s(fields.get(b"l", qid))))
            results = await asyncio.gather(*(self._deliver_agent(queue, agent, refs)
                                             for agent, refs in by_agent.items()))
            for agent, done in zip(by_agent, results):
                settled.extend(done)
                self.backlog.settle(agent, len(done))
            await self._park()
            if settled:
                pipe = self.ledger.aio.pipeline(transaction=True)
                pipe.xack(queue, GROUP, *settled)
                pipe.xdel(queue, *settled)
                await pipe.execute()
        finally:
            self._held[queue] -= held
            self._busy = False

    async def _deliver_agent(self, queue: str, agent_id: str, refs: list[tuple[str, str]]) -> list[str]:
        ctx = self.contexts.get(agent_id)
        manifest = ctx.memory if ctx is not None else None
        if manifest is None or manifest.retain is None:
            return [qid for qid, _ in refs]  # nothing was promised to a memory service
        pipe = self.ledger.aio.pipeline(transaction=False)
        key = self.keys.ledger(agent_id)
        for _, lid in refs:
            pipe.xrange(key, min=lid, max=lid, count=1)
        rows = await pipe.execute()
        todo: list[tuple[str, LedgerEntry]] = []
        settled: list[str] = []
        for (qid, _), row in zip(refs, rows):
            try:
                todo.append((qid, orjson.loads(row[0][1][b"e"])))
            except (IndexError, KeyError, orjson.JSONDecodeError):
                self.telemetry.warning("ledger_entry_missing", agent_id=agent_id, queue_id=qid)
                settled.append(qid)
        if not todo:
            return settled
        lane = self.lanes.setdefault(agent_id, Lane(agent_id, self._budget))
        oks = await self.sender.send(lane, ctx, manifest, [e for _, e in todo])
        lane.failures = 0 if all(oks) else lane.failures + 1
        lids = dict(refs)
        for (qid, _), ok in zip(todo, oks):
            if ok:
                settled.append(qid)
                self._retry.pop((queue, qid), None)
            else:
                attempts = self._retry.get((queue, qid), ("", "", 0, 0.0))[2] + 1
                delay = min(30.0, 0.2 * 2 ** min(attempts - 1, 8))
                if lane.retry_after:  # the service said when to come back
                    delay, lane.retry_after = min(30.0, lane.retry_after), 0.0
                self._retry[(queue, qid)] = (agent_id, lids[qid], attempts, time.monotonic() + delay)
        return settled

    async def _keep(self) -> None:
        """While this consumer lives, what it is delivering or retrying stays its own: their idle
        time is reset well before `claim_idle_s`, however long a slow service takes."""
        while not self._closing:
            await asyncio.sleep(min(1.0, self.claim_idle_s / 4))
            by_queue: dict[str, set[str]] = defaultdict(set)
            for queue, qids in self._held.items():
                by_queue[queue] |= qids
            for queue, qid in self._retry:
                by_queue[queue].add(qid)
            for queue, qids in by_queue.items():
                if not qids:
                    continue
                try:  # only what is still ours: never take back what another proxy claimed meanwhile
                    owned = {_s(p["message_id"]) for p in await self.ledger.aio.xpending_range(
                        queue, GROUP, min="-", max="+", count=10_000, consumername=self.consumer)}
                    keep = list(qids & owned)
                    if keep:
                        await self.ledger.aio.xclaim(queue, GROUP, self.consumer, 0, keep, justid=True)
                except redis.RedisError as exc:
                    self.telemetry.warning("retain_keep_failed", queue=queue, error=type(exc).__name__)
                    continue
                for qid in qids - owned:  # settled, or taken over while this proxy stalled
                    self._retry.pop((queue, qid), None)

    async def _retry_due(self) -> None:
        """Send again the entries that failed here and whose backoff is over."""
        if not self._retry:
            return
        now = time.monotonic()
        due: dict[str, list] = defaultdict(list)
        for (queue, qid), (agent_id, lid, _attempts, at) in list(self._retry.items()):
            if at <= now:
                due[queue].append((qid, {b"a": agent_id.encode(), b"l": lid.encode()}))
        for queue, messages in due.items():
            await self._deliver(queue, messages)

    async def _park(self) -> None:
        """Record this read's dead letters in the shared stream (before their entries are acknowledged)."""
        parked, self.sender.parked = self.sender.parked, []
        if not parked:
            return
        pipe = self.ledger.aio.pipeline(transaction=True)
        for agent_id, entry_id, reason in parked:
            pipe.xadd(self.keys.dead(), {"a": agent_id, "i": entry_id or "", "r": reason})
            if entry_id:
                pipe.sadd(self.keys.dead_ids(agent_id), entry_id)
        await pipe.execute()


def _id_tuple(sid: str) -> tuple[int, int]:
    ms, _, seq = sid.partition("-")
    try:
        return int(ms), int(seq or 0)
    except ValueError:
        return 0, 0
