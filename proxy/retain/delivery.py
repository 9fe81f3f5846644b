"""At-least-once retain delivery, driven by the durable ledger.

Each agent has a lane (`lane.py`) with a byte cursor persisted beside its ledger
(`files.py`): everything before it was acknowledged by the memory service. This module
runs the lanes — supervision, batching cadence, backoff, cursor saving — and answers what the
rest of the proxy asks about delivery; `sender.py` does the sending. Responses never wait
on any of it, and a restart resumes where delivery stopped. Services dedupe by entry id, so
at-least-once is exactly-once in effect.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp

from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry

from ..context_store import ContextStore
from ..ledger.entry import LedgerEntry
from ..ledger.files import Ledger
from .backlog import Backlog
from .files import CursorStore
from .lane import BufferBudget, Item, Lane
from .sender import RetainSender

SAVE_EVERY_S = 0.5


class RetainDelivery:
    def __init__(self, session: aiohttp.ClientSession, telemetry: Telemetry, redactor: Redactor, ledger: Ledger,
                 contexts: ContextStore, *, max_buffered: int = 10_000, batch: int = 8, batch_call: int = 32,
                 linger_s: float = 0.02,
                 backoff_s: float = 0.2, max_backoff_s: float = 30.0, max_in_flight: int = 16) -> None:
        self.telemetry = telemetry
        self.ledger = ledger
        self.contexts = contexts
        self.cursors = CursorStore(ledger.root)
        self.sender = RetainSender(session, telemetry, redactor, ledger.root, max_in_flight=max_in_flight)
        self.budget = BufferBudget(max_buffered)
        self.batch = batch  # entries a lane takes at once, sent as concurrent retains
        self.batch_call = batch_call  # ... or as one call, to a service with a batch endpoint
        # A lane that can batch waits this long for company before a partial batch: at a turn
        # every few milliseconds that is several turns per call instead of one, and the retain
        # stops competing with the very next turn's recall for the service's attention.
        self.linger_s = linger_s
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.lanes: dict[str, Lane] = {}
        self._closing = False
        self.backlog = Backlog()  # entries handed over since start and not yet settled

    # -- lifecycle --

    async def start(self) -> None:
        """Resume every agent whose ledger holds entries not yet acknowledged."""
        for agent_id in self.ledger.agents():
            if not self.cursors.exists(agent_id):
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
            if self.cursors.exists(agent_id):
                cursor = self.cursors.read(agent_id)
            else:
                cursor = start_at
                # on disk before anything is delivered, so a crash cannot make a restart skip this agent
                self.cursors.write(agent_id, cursor)
            lane = Lane(agent_id, self.budget, cursor=cursor, saved=cursor)
            self.lanes[agent_id] = lane
            lane.task = asyncio.create_task(self._supervise(lane))
        return lane

    async def _supervise(self, lane: Lane) -> None:
        """A lane never dies: whatever ends its loop is logged and the loop starts again."""
        restarts = 0
        while not self._closing:
            try:
                await self._run(lane)
            except Exception as exc:
                restarts += 1
                lane.state = "backoff"
                self.telemetry.error("retain_lane_restarted", agent_id=lane.agent_id, restarts=restarts,
                                         error=f"{type(exc).__name__}: {exc}"[:300])
                await asyncio.sleep(min(self.max_backoff_s, self.backoff_s * 2 ** min(restarts, 8)))
                lane.from_file = True  # start again from the durable cursor
                lane.wake.set()

    def prepare(self, agent_id: str) -> None:
        """Call before ledgering an agent's entry: a new lane starts at the ledger's current end,
        which every append still in flight lands at or after."""
        if agent_id not in self.lanes:
            self._lane(agent_id, start_at=self.ledger.size(agent_id))

    def submit(self, agent_id: str, start: int, end: int, entry: LedgerEntry) -> None:
        """Hand over a freshly ledgered entry; never blocks, never raises."""
        self.backlog.add(agent_id)
        self._lane(agent_id, start_at=start).offer((start, end, entry))

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
            self.cursors.write(lane.agent_id, lane.cursor)
        except OSError:
            pass

    # -- what the rest of the proxy asks --

    @property
    def dead_letters(self) -> int:
        return self.sender.dead_letters

    def entry_state(self, agent_id: str, entry_id: str, end: int) -> str:
        """pending | delivered | dead-lettered | failed: <reason> (being retried) | not retained."""
        lane = self.lanes.get(agent_id)
        if entry_id in self.sender.dead_ids:
            return "dead-lettered"
        if lane is None:
            return "not retained"
        if lane.cursor >= end:
            return "delivered"
        if lane.failures:
            return f"failed: {lane.last_error or 'retrying'} (will retry)"
        return "pending"

    def caught_up(self) -> bool:
        """Every ledgered entry has been acknowledged by its memory service."""
        return all(lane.cursor >= self.ledger.size(agent_id) for agent_id, lane in self.lanes.items())

    def idle(self) -> bool:
        """Nothing is being delivered right now (lanes backing off count as idle)."""
        return all(lane.idle() for lane in self.lanes.values())

    # -- the lane loop --

    def _manifest(self, agent_id: str):
        ctx = self.contexts.get(agent_id)
        return ctx, (ctx.memory if ctx is not None else None)

    def _batch_size(self, agent_id: str) -> int:
        _, manifest = self._manifest(agent_id)
        return self.batch_call if self.sender.can_batch(manifest) else self.batch

    def _torn(self, lane: Lane) -> None:
        self.telemetry.warning("ledger_torn_line", agent_id=lane.agent_id,
                               detail="skipped an incomplete ledger line (a crash mid-write)")

    async def _run(self, lane: Lane) -> None:
        while True:
            await lane.wake.wait()
            lane.wake.clear()
            while not self._closing:
                lane.state = "busy"
                size = self._batch_size(lane.agent_id)
                if size > self.batch and not lane.from_file and 0 < len(lane.pending) < size:
                    await asyncio.sleep(self.linger_s)
                batch = await lane.next_items(self.ledger, size, lambda: self._torn(lane))
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

    async def _deliver_batch(self, lane: Lane, batch: list[Item]) -> None:
        """Send until every entry is settled, backing off between attempts (Retry-After wins)."""
        ctx, manifest = self._manifest(lane.agent_id)
        todo = list(batch)
        while todo and not self._closing:
            if manifest is None or manifest.retain is None:
                todo = []  # this agent has no retain endpoint: nothing to deliver
                break
            results = await self.sender.send(lane, ctx, manifest, [e for _, _, e in todo])
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
                ctx, manifest = self._manifest(lane.agent_id)
            else:
                lane.failures = 0
        if not todo:
            self.backlog.settle(lane.agent_id, len(batch))
            lane.cursor = max(lane.cursor, batch[-1][1])
            await self._save(lane)
