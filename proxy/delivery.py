"""At-least-once retain delivery, driven by the durable ledger.

Each agent has a lane with a byte cursor, persisted beside its ledger as `retain.cursor`:
everything before it was acknowledged by the memory service. New turns reach the lane in
memory (the fast path); when that buffer would overflow, when the service is down, or after a
restart, the lane re-reads the ledger from its cursor instead. Memory stays bounded, responses
never wait on it, and a restart resumes where delivery stopped. Services dedupe by entry id,
so at-least-once is exactly-once in effect.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from memplane_core.private_files import append_private, write_private
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry

from .context_store import ContextStore
from .ledger import Ledger
from .retain import (
    BatchUnsupported,
    RetainJob,
    RetryableRetainError,
    post_retain,
    post_retain_batch,
    scrub_job,
)

CURSOR_FILE = "retain.cursor"
DEAD_LETTER_FILE = "retain.dead.jsonl"
SAVE_EVERY_S = 0.5


@dataclass
class Lane:
    agent_id: str
    cursor: int = 0
    pending: deque = field(default_factory=deque)  # (start, end, entry) in ledger order
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


class RetainDelivery:
    def __init__(self, session: aiohttp.ClientSession, telemetry: Telemetry, redactor: Redactor, ledger: Ledger,
                 contexts: ContextStore, *, max_buffered: int = 10_000, batch: int = 8, batch_call: int = 32,
                 linger_s: float = 0.02,
                 backoff_s: float = 0.2, max_backoff_s: float = 30.0, max_in_flight: int = 16) -> None:
        self.session = session
        self.telemetry = telemetry
        self.redactor = redactor
        self.ledger = ledger
        self.contexts = contexts
        self.max_buffered = max_buffered
        self.batch = batch  # entries a lane takes at once, sent as concurrent retains
        self.batch_call = batch_call  # ... or as one call, to a service with a batch endpoint
        self._no_batch: set[str] = set()  # batch URLs that answered 404/405
        # A lane that can batch waits this long for company before a partial batch: at a turn
        # every few milliseconds that is several turns per call instead of one, and the retain
        # stops competing with the very next turn's recall for the service's attention.
        self.linger_s = linger_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.lanes: dict[str, Lane] = {}
        # retains in flight across all agents: a slow service gets steady load, not a retry storm
        self._slots = asyncio.Semaphore(max_in_flight)
        self._buffered = 0
        self._closing = False
        self.dead_letters = 0  # entries parked in retain.dead.jsonl since start
        self.dead_ids: set[str] = set()
        self._submitted = 0  # entries handed over since start
        self._settled = 0  # ... and acknowledged, refused or parked since start

    # -- lifecycle --

    def _cursor_path(self, agent_id: str):
        return self.ledger.root / agent_id / CURSOR_FILE

    def _read_cursor(self, agent_id: str) -> int:
        try:
            return int(orjson.loads(self._cursor_path(agent_id).read_bytes())["offset"])
        except (FileNotFoundError, KeyError, ValueError, TypeError, orjson.JSONDecodeError):
            return 0

    def _write_cursor(self, agent_id: str, offset: int) -> None:
        write_private(self._cursor_path(agent_id), orjson.dumps({"offset": offset, "ts": time.time()}))

    async def start(self) -> None:
        """Resume every agent whose ledger holds entries not yet acknowledged."""
        for agent_id in self.ledger.agents():
            if not self._cursor_path(agent_id).exists():
                continue  # this agent never had memory: nothing was promised to a service
            lane = self._lane(agent_id)
            if lane.cursor < self.ledger.size(agent_id):
                lane.from_file = True
                lane.wake.set()

    def _lane(self, agent_id: str, start_at: int = 0) -> Lane:
        lane = self.lanes.get(agent_id)
        if lane is None:
            # An agent's first retain starts delivery at that entry: turns from before its memory
            # was switched on are not sent unasked (`memplane memory backfill` does that).
            if self._cursor_path(agent_id).exists():
                cursor = self._read_cursor(agent_id)
            else:
                cursor = start_at
                # on disk before anything is delivered, so a crash cannot make a restart skip this agent
                self._write_cursor(agent_id, cursor)
            lane = Lane(agent_id, cursor=cursor, saved=cursor)
            self.lanes[agent_id] = lane
            lane.task = asyncio.create_task(self._supervise(lane))
        return lane

    async def _supervise(self, lane: Lane) -> None:
        """A lane never dies: whatever ends its loop is logged and the loop starts again."""
        restarts = 0
        while not self._closing:
            try:
                await self._run(lane)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                restarts += 1
                lane.state = "backoff"
                self.telemetry.log.error("retain_lane_restarted", claw_id=lane.agent_id, restarts=restarts,
                                         error=f"{type(exc).__name__}: {exc}"[:300])
                await asyncio.sleep(min(self.max_backoff_s, self.backoff_s * 2 ** min(restarts, 8)))
                lane.from_file = True  # start again from the durable cursor
                lane.wake.set()

    def prepare(self, agent_id: str) -> None:
        """Call before ledgering an agent's entry: a new lane starts at the ledger's current end,
        which every append still in flight lands at or after."""
        if agent_id not in self.lanes:
            self._lane(agent_id, start_at=self.ledger.size(agent_id))

    def submit(self, agent_id: str, start: int, end: int, entry: dict[str, Any]) -> None:
        """Hand over a freshly ledgered entry; never blocks, never raises."""
        lane = self._lane(agent_id, start_at=start)
        self._submitted += 1
        if lane.from_file or self._buffered >= self.max_buffered:
            lane.from_file = True  # the ledger has it; the lane will read it from there
            self._drop_buffer(lane)
        else:
            lane.pending.append((start, end, entry))
            self._buffered += 1
        lane.wake.set()

    def _drop_buffer(self, lane: Lane) -> None:
        self._buffered -= len(lane.pending)
        lane.pending.clear()

    async def close(self, grace_s: float) -> None:
        """Finish what is in flight within `grace_s`; the rest stays for the next start."""
        self._closing = True
        deadline = time.monotonic() + grace_s
        while any(lane.state == "busy" for lane in self.lanes.values()) and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for lane in self.lanes.values():
            if lane.flush:
                lane.flush.cancel()
            if lane.task:
                lane.task.cancel()
        await asyncio.gather(*(lane.task for lane in self.lanes.values() if lane.task), return_exceptions=True)
        for lane in self.lanes.values():
            self._write_cursor_safe(lane)

    def _write_cursor_safe(self, lane: Lane) -> None:
        try:
            self._write_cursor(lane.agent_id, lane.cursor)
        except OSError:
            pass

    def entry_state(self, agent_id: str, entry_id: str, end: int) -> str:
        """pending | delivered | dead-lettered | failed: <reason> (being retried) | not retained."""
        lane = self.lanes.get(agent_id)
        if entry_id in self.dead_ids:
            return "dead-lettered"
        if lane is None:
            return "not retained"
        if lane.cursor >= end:
            return "delivered"
        if lane.failures:
            return f"failed: {lane.last_error or 'retrying'} (will retry)"
        return "pending"

    def backlog(self) -> float:
        """Entries ledgered since start and not yet settled (a restart's leftovers settle first
        and are not counted)."""
        return float(max(0, self._submitted - self._settled))

    def caught_up(self) -> bool:
        """Every ledgered entry has been acknowledged by its memory service."""
        return all(lane.cursor >= self.ledger.size(agent_id) for agent_id, lane in self.lanes.items())

    def idle(self) -> bool:
        """Nothing is being delivered right now (lanes backing off count as idle)."""
        return all(lane.state != "busy" and (lane.state == "backoff" or
                                             (not lane.pending and not lane.wake.is_set()))
                   for lane in self.lanes.values())

    # -- the lane loop --

    def _batch_size(self, agent_id: str) -> int:
        ctx = self.contexts.get(agent_id)
        url = ctx.memory.batch_url() if ctx is not None and ctx.memory is not None else None
        return self.batch_call if url and url not in self._no_batch else self.batch

    async def _next_batch(self, lane: Lane) -> list[tuple[int, int, dict[str, Any]]]:
        while lane.pending and lane.pending[0][0] < lane.cursor:
            lane.pending.popleft()  # already delivered (read from the file earlier)
            self._buffered -= 1
        if not lane.from_file and lane.pending and lane.pending[0][0] > lane.cursor:
            lane.from_file = True  # a gap: something was not buffered; the ledger has it
        limit = self._batch_size(lane.agent_id)
        if lane.from_file:
            self._drop_buffer(lane)
            torn: list[int] = []

            def read() -> list[tuple[int, int, dict[str, Any]]]:
                out = []
                for ref in self.ledger.read(lane.agent_id, start_offset=lane.cursor, on_torn=torn.append):
                    out.append((ref.offset, ref.end, ref.entry))
                    if len(out) >= limit:
                        break
                return out

            items = await self.ledger.run(read)
            if torn:
                self.telemetry.warning("ledger_torn_line", claw_id=lane.agent_id,
                                       detail="skipped an incomplete ledger line (a crash mid-write)")
            if not items and lane.cursor >= self.ledger.size(lane.agent_id):
                lane.from_file = False
            return items
        items = []
        while lane.pending and len(items) < limit:
            items.append(lane.pending.popleft())
            self._buffered -= 1
        return items

    async def _run(self, lane: Lane) -> None:
        while True:
            await lane.wake.wait()
            lane.wake.clear()
            while not self._closing:
                lane.state = "busy"
                size = self._batch_size(lane.agent_id)
                if size > self.batch and not lane.from_file and 0 < len(lane.pending) < size:
                    await asyncio.sleep(self.linger_s)
                batch = await self._next_batch(lane)
                if not batch:
                    break
                await self._deliver_batch(lane, batch)
            await self._save(lane)
            self._save_later(lane)
            lane.state = "idle"

    async def _save(self, lane: Lane) -> None:
        """Persist the cursor at most twice a second (a write and a rename per turn would cost
        more than the turn's own ledger line), and on close.

        A crash can only make delivery repeat the last moments' entries, which services dedupe.
        """
        if lane.cursor == lane.saved or time.monotonic() - lane.saved_at < SAVE_EVERY_S:
            return
        lane.saved, lane.saved_at = lane.cursor, time.monotonic()
        await self.ledger.run(self._write_cursor_safe, lane)

    def _save_later(self, lane: Lane) -> None:
        """An idle lane's unsaved cursor is written once the debounce interval has passed."""
        if lane.cursor == lane.saved or lane.flush is not None or self._closing:
            return

        def due() -> None:
            lane.flush = None
            if lane.state == "idle" and not self._closing:
                lane.wake.set()  # the lane loop saves it (one writer per cursor file)

        delay = max(0.0, SAVE_EVERY_S - (time.monotonic() - lane.saved_at))
        lane.flush = asyncio.get_running_loop().call_later(delay + 0.01, due)

    async def _deliver_batch(self, lane: Lane, batch: list[tuple[int, int, dict[str, Any]]]) -> None:
        ctx = self.contexts.get(lane.agent_id)
        manifest = ctx.memory if ctx is not None else None
        todo = list(batch)
        while todo and not self._closing:
            if manifest is None or manifest.retain is None:
                todo = []  # this agent has no retain endpoint: nothing to deliver
                break
            results = await self._deliver(lane, ctx, manifest, [e for _, _, e in todo])
            todo = [item for item, ok in zip(todo, results) if not ok]
            if todo:
                lane.failures += 1
                lane.state = "backoff"
                delay = min(self.max_backoff_s, self.backoff_s * 2 ** min(lane.failures - 1, 10))
                if lane.retry_after:  # the service said when to come back
                    delay = min(self.max_backoff_s, lane.retry_after)
                    lane.retry_after = 0.0
                await asyncio.sleep(delay)
                lane.state = "busy"
                ctx = self.contexts.get(lane.agent_id)
                manifest = ctx.memory if ctx is not None else None
            else:
                lane.failures = 0
        if not todo:
            self._settled += len(batch)
            lane.cursor = max(lane.cursor, batch[-1][1])
            await self._save(lane)

    def _dead_letter(self, lane: Lane, manifest, entry: Any, reason: str) -> bool:
        """Park one entry that cannot be delivered (it could not be scrubbed or serialised, or the
        service's answer made no sense) in `retain.dead.jsonl`, log it, and go on with the next.
        `memplane memory backfill --dead-letters` replays the file."""
        entry_id = entry.get("id") if isinstance(entry, dict) else None
        self.dead_letters += 1
        if entry_id:
            self.dead_ids.add(entry_id)
        self.telemetry.memory_op(claw_id=lane.agent_id, service=getattr(manifest, "service", None), op="retain",
                                 status="failed", error=f"dead-lettered: {reason}"[:300], entry_id=entry_id,
                                 dead_letter=True)
        try:
            append_dead_letter(self.ledger.root, lane.agent_id, entry_id, reason)
        except OSError as exc:
            self.telemetry.log.error("dead_letter_not_written", claw_id=lane.agent_id, entry_id=entry_id,
                                     error=type(exc).__name__)
        return True

    def _job(self, lane: Lane, ctx, manifest, entry: dict[str, Any]) -> RetainJob:
        meta = ctx.memory_metadata(_api_name(entry.get("path", "")), entry.get("requested_model"),
                                   entry.get("session_id"))
        return scrub_job(self.redactor, RetainJob(lane.agent_id, ctx.metadata.pod, manifest, entry, meta))

    async def _deliver(self, lane: Lane, ctx, manifest, entries: list[dict[str, Any]]) -> list[bool]:
        """Deliver entries; per entry, True when acknowledged or permanently refused."""
        url = manifest.batch_url()
        if len(entries) > 1 and url and url not in self._no_batch:
            try:
                return await self._deliver_together(lane, ctx, manifest, entries)
            except BatchUnsupported:
                self._no_batch.add(url)
                self.telemetry.warning("retain_batch_unsupported", claw_id=lane.agent_id, service=manifest.service,
                                       detail="the service has no batch endpoint; retaining one entry per call")
        return list(await asyncio.gather(*(self._deliver_one(lane, ctx, manifest, e) for e in entries)))

    async def _deliver_together(self, lane: Lane, ctx, manifest, entries: list[dict[str, Any]]) -> list[bool]:
        """One call for many entries; each still gets its own memory_op line. An entry that cannot
        be prepared is dead-lettered alone; a batch that cannot be sent is sent entry by entry."""
        done: list[bool | None] = [None] * len(entries)
        jobs: list[tuple[int, RetainJob]] = []
        for i, entry in enumerate(entries):
            try:
                jobs.append((i, self._job(lane, ctx, manifest, entry)))
            except Exception as exc:
                done[i] = self._dead_letter(lane, manifest, entry, f"could not prepare: {type(exc).__name__}: {exc}")
        if jobs:
            async with self._slots:
                started = time.perf_counter()
                try:
                    codes: list[int | None] = await post_retain_batch(self.session, [j for _, j in jobs])
                    error = ""
                except RetryableRetainError as exc:
                    codes, error = [None] * len(jobs), str(exc)
                    self._note_retry_after(lane, exc)
                except BatchUnsupported:
                    raise
                except Exception:  # e.g. one entry that serialises alone but not inside the batch
                    codes = None
            if codes is None:
                singles = await asyncio.gather(*(self._deliver_one(lane, ctx, manifest, entries[i]) for i, _ in jobs))
                for (i, _), ok in zip(jobs, singles):
                    done[i] = ok
            else:
                latency_ms = (time.perf_counter() - started) * 1000
                for (i, job), code in zip(jobs, codes):
                    done[i] = self._report(lane, manifest, job, code, error, latency_ms, batch_size=len(jobs))
        return [bool(d) for d in done]

    def _note_retry_after(self, lane: Lane, exc: RetryableRetainError) -> None:
        if exc.retry_after is not None:
            lane.retry_after = max(lane.retry_after, exc.retry_after)

    def _report(self, lane: Lane, manifest, job: RetainJob, status: int | None, error: str, latency_ms: float,
                **extra: Any) -> bool:
        """Log one entry's retain; True when acknowledged (2xx) or permanently refused (4xx)."""
        entry_id = job.entry.get("id")
        if status is None or status >= 500 or status == 429:
            lane.last_error = error or f"status {status}"
            self.telemetry.memory_op(claw_id=lane.agent_id, service=manifest.service, op="retain", status="failed",
                                     latency_ms=latency_ms, error=error or f"status {status}", entry_id=entry_id,
                                     will_retry=True, **extra)
            return False
        ok = 200 <= status < 300
        self.telemetry.memory_op(claw_id=lane.agent_id, service=manifest.service, op="retain",
                                 status="succeeded" if ok else "failed", status_code=status, latency_ms=latency_ms,
                                 removed=job.metadata.get("policy_removed", 0),
                                 error=None if ok else f"refused with status {status}", entry_id=entry_id, **extra)
        return True

    async def _deliver_one(self, lane: Lane, ctx, manifest, entry: dict[str, Any]) -> bool:
        """True when acknowledged (2xx), permanently refused (4xx) or dead-lettered; False to retry."""
        try:
            job = self._job(lane, ctx, manifest, entry)
        except Exception as exc:
            return self._dead_letter(lane, manifest, entry, f"could not prepare: {type(exc).__name__}: {exc}")
        status: int | None = None
        error = ""
        async with self._slots:
            started = time.perf_counter()
            try:
                status = await post_retain(self.session, job)
            except RetryableRetainError as exc:
                error = str(exc)
                self._note_retry_after(lane, exc)
            except Exception as exc:  # the payload cannot be serialised, or anything unforeseen
                return self._dead_letter(lane, manifest, entry, f"could not send: {type(exc).__name__}: {exc}")
        return self._report(lane, manifest, job, status, error, (time.perf_counter() - started) * 1000)


def append_dead_letter(history_root, agent_id: str, entry_id: str | None, reason: str) -> None:
    """One line per undeliverable entry: its id (the ledger holds the turn) and why."""
    line = orjson.dumps({"entry_id": entry_id, "reason": reason[:500], "ts": time.time()}) + b"\n"
    append_private(history_root / agent_id / DEAD_LETTER_FILE, line)


def _api_name(path: str) -> str:
    if path.startswith("/v1/messages"):
        return "anthropic"
    if path.startswith("/v1/responses"):
        return "responses"
    return "openai"
