"""Operator memory operations: forget (remote + local tombstone) and backfill (ledger replay through
live delivery's sender)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from manifests.models import MemoryManifest
from memplane_core.ids import is_agent_id
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry

from ..config import ProxySettings
from ..context_store import ContextStore
from ..ledger.entry import LedgerEntry
from ..ledger.redis_streams import open_ledger
from ..memory_service import MemoryService, MemoryServiceError
from ..retain.job import RetainJob, scrub_job_async
from ..retain.lane import BufferBudget, Lane
from ..retain.sender import RetainSender, retain_job


class OperatorError(Exception):
    pass


def subscribers(contexts: ContextStore, service: str, agents: tuple[str, ...] = ()) -> dict[str, MemoryManifest | None]:
    """Agents whose memory.json names `service` (restricted to `agents` when given)."""
    found: dict[str, MemoryManifest | None] = {}
    for agent_id in agents or contexts.agent_ids():
        ctx = contexts.get(agent_id)
        if ctx is not None and ctx.memory is not None and ctx.memory.service == service:
            found[agent_id] = ctx.memory
        elif agents:
            found[agent_id] = None
    return found


@dataclass
class ForgetOutcome:
    agent_id: str
    tombstoned: int
    remote: str  # "ok" | "failed: …" | "no forget endpoint" | "no manifest"


async def forget(contexts: ContextStore, history_root: Path, service: str, entry_ids: list[str], reason: str,
                 *, agents: tuple[str, ...] = (), telemetry: Telemetry) -> list[ForgetOutcome]:
    """Tombstone locally first (so backfill can never resurrect), then call the service."""
    ledger = open_ledger(history_root)  # the file ledger, or the shared one (MEMPLANE_LEDGER=redis)
    for agent_id in agents:
        if not is_agent_id(agent_id):
            raise OperatorError(f"invalid agent id {agent_id!r}")
        if contexts.get(agent_id) is None and not ledger.has_agent(agent_id):
            raise OperatorError(f"unknown agent {agent_id!r}: no context directory and no ledger")
    targets = subscribers(contexts, service, agents)
    if not targets:
        raise OperatorError(f"no agent subscribes to memory service '{service}'; name one with --agent")
    # only the agents whose ledger holds an id get its tombstone; an id in no ledger is an error
    wanted = set(entry_ids)
    found: dict[str, set[str]] = {}
    for agent_id in targets:
        hits = {ref.entry.get("id") for ref in ledger.read(agent_id)} & wanted
        if hits:
            found[agent_id] = hits
    missing = wanted - set().union(*found.values()) if found else wanted
    if missing:
        where = f"agent {', '.join(agents)}" if agents else f"any ledger of '{service}' subscribers"
        raise OperatorError(f"entry id(s) not found in {where}: {', '.join(sorted(missing))}")
    targets = {a: m for a, m in targets.items() if a in found}
    outcomes = []
    async with aiohttp.ClientSession() as session:
        for agent_id, manifest in targets.items():
            ids = sorted(found[agent_id])
            ledger.add_tombstones(agent_id, ids, reason)
            ctx = contexts.get(agent_id)
            remote = await remote_forget(session, telemetry, manifest, agent_id, ctx.metadata.pod if ctx else "",
                                         ids, reason)
            outcomes.append(ForgetOutcome(agent_id, len(ids), remote))
    return outcomes


async def remote_forget(session: aiohttp.ClientSession, telemetry: Telemetry, manifest: MemoryManifest | None,
                        agent_id: str, pod: str, entry_ids: list[str], reason: str, **log: Any) -> str:
    """Ask the agent's memory service to forget entries; "ok" or what went wrong (logged as a
    memory_op either way). The local tombstone is the caller's, written first."""
    if manifest is None:
        return "no memory.json for this agent; tombstone recorded locally only"
    if manifest.forget is None:
        return "service declares no forget endpoint; tombstone recorded locally only"
    started = time.perf_counter()
    try:
        status_code, result = await MemoryService.of(session, manifest, agent_id, pod).forget(entry_ids, reason), "ok"
    except MemoryServiceError as exc:
        status_code, result = exc.status, f"failed: {exc.reason}"
    telemetry.memory_op(agent_id=agent_id, service=manifest.service, op="forget",
                        status="succeeded" if result == "ok" else "failed", status_code=status_code,
                        latency_ms=(time.perf_counter() - started) * 1000,
                        error=None if result == "ok" else result, entries=len(entry_ids), **log)
    return result


@dataclass
class BackfillStats:
    sent: int = 0
    skipped_tombstoned: int = 0
    failed: int = 0
    per_agent: dict[str, dict[str, int]] = field(default_factory=dict)


ATTEMPTS = 6  # sends of one batch of a replay, while the service answers busy or not at all
BACKOFF_S = 0.2  # doubled each time, unless the service said when to come back (Retry-After)
MAX_WAIT_S = 30.0


class BackfillSender(RetainSender):
    """Live delivery's sender for a replay: each entry carries the metadata live retain sent (plus
    `backfill: true`), goes in the same batches and is retried the same way. Outcomes are counted for
    the operator rather than logged entry by entry, and an entry that cannot be sent is reported, not
    parked: the operator is watching. `url`/`token`: another retain endpoint and its bearer token."""

    def __init__(self, session: aiohttp.ClientSession, telemetry: Telemetry, redactor: Redactor,
                 history_root: Path, *, service: str, url: str | None, token: str | None, concurrency: int) -> None:
        super().__init__(session, telemetry, redactor, history_root, max_in_flight=max(1, concurrency))
        self.service, self.url, self.token = service, url, token
        self.sent = self.failed = 0

    def _service(self, job: RetainJob) -> MemoryService:
        return MemoryService.of(self.session, job.manifest, job.agent_id, job.pod, token=self.token,
                                retain_url=self.url)

    def can_batch(self, manifest) -> bool:
        return not self.url and super().can_batch(manifest)  # --url names a retain endpoint only

    async def _job(self, lane: Lane, ctx, manifest, entry: LedgerEntry) -> RetainJob:
        if ctx is not None:  # the metadata live delivery sent (session, timezone, model)
            return await retain_job(self.redactor, lane.agent_id, ctx, manifest, entry, op="backfill",
                                    extra={"backfill": True})
        # a ledger without a context dir (--url): only what the ledger knows
        return await scrub_job_async(self.redactor, RetainJob(lane.agent_id, "", manifest, entry,
                                                              {"service": self.service, "backfill": True},
                                                              op="backfill"))

    def _log(self, lane: Lane, manifest, entry_id: str | None, status: str, **fields: Any) -> None:
        if status == "succeeded":
            self.sent += 1
        elif status == "skipped":  # a side call: nothing to send
            pass
        elif not fields.get("will_retry"):
            self.failed += 1
            self.telemetry.warning("backfill_entry_failed", agent_id=lane.agent_id, entry_id=entry_id,
                                   error=str(fields.get("error"))[:200])

    def _park(self, agent_id: str, entry_id: str | None, reason: str) -> None:
        pass

    async def settle(self, lane: Lane, ctx, manifest, entries: list[LedgerEntry], attempts: int) -> int:
        """Send until every entry is settled or `attempts` are spent; how many were not."""
        todo = entries
        for attempt in range(attempts):
            todo = [e for e, ok in zip(todo, await self.send(lane, ctx, manifest, todo)) if not ok]
            if not todo or attempt == attempts - 1:
                break
            await asyncio.sleep(min(MAX_WAIT_S, lane.retry_after or BACKOFF_S * 2 ** attempt))
            lane.retry_after = 0.0
        return len(todo)


async def backfill(contexts: ContextStore, history_root: Path, service: str, *, after: str | None = None,
                   limit: int = 0, agents: tuple[str, ...] = (), url: str | None = None,
                   auth_token: str | None = None, concurrency: int = 8, redactor: Redactor,
                   telemetry: Telemetry, progress: Callable[[int], None] | None = None,
                   total_hint: Callable[[int], None] | None = None, dead_letters: bool = False) -> BackfillStats:
    """Replay ledger entries into the retain endpoint with the ids live retain used, through live
    delivery's sender (`BackfillSender`). With `dead_letters`, only the entries delivery parked in
    `retain.dead.jsonl` are replayed."""
    for agent_id in agents:
        if not is_agent_id(agent_id):
            raise OperatorError(f"invalid agent id {agent_id!r}")
    ledger = open_ledger(history_root)
    targets = subscribers(contexts, service, agents)
    if url:  # an explicit URL can replay agents that have a ledger but no manifest for the service
        for agent_id in agents or ledger.agents():
            targets.setdefault(agent_id, None)
    if not targets:
        raise OperatorError(f"no agent subscribes to memory service '{service}'; use --agent and --url")
    stats = BackfillStats()
    async with aiohttp.ClientSession() as session:
        sender = BackfillSender(session, telemetry, redactor, history_root, service=service, url=url,
                                token=auth_token, concurrency=concurrency)
        for agent_id, manifest in targets.items():
            if manifest is None and not url:
                raise OperatorError(f"agent '{agent_id}' has no memory.json for '{service}'; pass --url")
            if manifest is not None and manifest.retain is None and not url:
                raise OperatorError(f"service '{service}' declares no retain endpoint for agent '{agent_id}'")
            manifest = manifest or MemoryManifest(service=service, base_url=url or "")
            entries, skipped = _replayed(ledger, agent_id, after=after, limit=limit, dead_letters=dead_letters)
            if total_hint:
                total_hint(len(entries))
            started = time.perf_counter()
            sender.sent = sender.failed = 0
            lane, ctx = Lane(agent_id, BufferBudget(0)), contexts.get(agent_id)
            size = ProxySettings.retain_batch_call if sender.can_batch(manifest) else max(1, concurrency)
            attempts = ATTEMPTS
            for i in range(0, len(entries), size):
                part = entries[i:i + size]
                given_up = await sender.settle(lane, ctx, manifest, part, attempts)
                sender.failed += given_up
                if given_up == len(part):
                    attempts = 1  # nothing got through at all: the service is down; try the rest once each
                if progress:
                    progress(len(part))
            counts = {"sent": sender.sent, "skipped_tombstoned": skipped, "failed": sender.failed}
            telemetry.memory_op(agent_id=agent_id, service=service, op="backfill",
                                status="succeeded" if not counts["failed"] else "failed",
                                latency_ms=(time.perf_counter() - started) * 1000, **counts)
            stats.per_agent[agent_id] = counts
            stats.sent += counts["sent"]
            stats.skipped_tombstoned += counts["skipped_tombstoned"]
            stats.failed += counts["failed"]
    return stats


def _replayed(ledger: Any, agent_id: str, *, after: str | None, limit: int,
              dead_letters: bool) -> tuple[list[LedgerEntry], int]:
    """The agent's entries a backfill sends, in ledger order, and how many tombstones skipped."""
    tombstones = ledger.tombstones(agent_id)
    parked = ledger.dead_letters(agent_id) if dead_letters else None
    entries: list[LedgerEntry] = []
    skipped = 0
    for ref in ledger.read(agent_id, start_offset=ledger.seek_offset(agent_id, after) if after else 0):
        entry = ref.entry
        if parked is not None and entry.get("id") not in parked:
            continue
        if after and str(entry.get("ts", "")) <= after:
            continue
        if entry.get("id") in tombstones:
            skipped += 1
            continue
        entries.append(entry)
        if limit and len(entries) >= limit:
            break
    return entries, skipped
