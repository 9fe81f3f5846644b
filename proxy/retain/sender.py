"""Sending a lane's entries to its memory service, and saying how each one went.

Several entries go as one call to a service that offers `retain.batch_path`, else as concurrent
single retains. Each entry gets its own `memory_op` line either way. An entry that cannot be
prepared or sent at all is parked in the dead-letter file so the entries after it still go.
Backfill sends through this too (`operator/memory_ops.py`), so a replayed entry carries the same
metadata, goes in the same batches and is retried the same way as a live one.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import aiohttp

from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry

from ..coding.for_memory import for_memory, leaves_no_memory
from ..formats import format_for_path
from ..ledger.entry import LedgerEntry
from ..memory_service import BatchUnsupported, MemoryService, RetryableRetainError
from .files import append_dead_letter
from .job import RetainJob, scrub_job_async
from .lane import Lane


class RetainSender:
    def __init__(self, session: aiohttp.ClientSession, telemetry: Telemetry, redactor: Redactor,
                 history_root: Path, *, max_in_flight: int) -> None:
        self.session = session
        self.telemetry = telemetry
        self.redactor = redactor
        self.history_root = history_root
        # retains in flight across all agents: a slow service gets steady load, not a retry storm
        self._slots = asyncio.Semaphore(max_in_flight)
        self._no_batch: set[str] = set()  # batch URLs that answered 404/405
        self.dead_letters = 0  # entries parked since start
        self.dead_ids: set[str] = set()

    def can_batch(self, manifest) -> bool:
        url = manifest.batch_url() if manifest is not None else None
        return bool(url) and url not in self._no_batch

    def _service(self, job: RetainJob) -> MemoryService:
        return MemoryService.of(self.session, job.manifest, job.agent_id, job.pod)

    async def send(self, lane: Lane, ctx, manifest, entries: list[LedgerEntry]) -> list[bool]:
        """Per entry: True when acknowledged, permanently refused, dead-lettered or leaving no memory
        (a coding client's side call: coding/for_memory.py); False to retry."""
        sends = [not leaves_no_memory(e) for e in entries]
        if all(sends):
            return await self._send(lane, ctx, manifest, entries)
        for entry, s in zip(entries, sends):
            if not s:
                self._log(lane, manifest, entry.get("id"), "skipped",
                          error="a side call, a subagent's call or a call of no known project leaves no memory")
        done = iter(await self._send(lane, ctx, manifest, [e for e, s in zip(entries, sends) if s]))
        return [next(done) if s else True for s in sends]

    async def _send(self, lane: Lane, ctx, manifest, entries: list[LedgerEntry]) -> list[bool]:
        if not entries:
            return []
        if len(entries) > 1 and self.can_batch(manifest):
            try:
                return await self._send_together(lane, ctx, manifest, entries)
            except BatchUnsupported:
                self._no_batch.add(manifest.batch_url())
                self.telemetry.warning("retain_batch_unsupported", agent_id=lane.agent_id, service=manifest.service,
                                       detail="the service has no batch endpoint; retaining one entry per call")
        return list(await asyncio.gather(*(self._send_one(lane, ctx, manifest, e) for e in entries)))

    async def _job(self, lane: Lane, ctx, manifest, entry: LedgerEntry) -> RetainJob:
        return await retain_job(self.redactor, lane.agent_id, ctx, manifest, entry)

    async def _send_together(self, lane: Lane, ctx, manifest, entries: list[LedgerEntry]) -> list[bool]:
        """One call for many entries. An entry that cannot be prepared is dead-lettered alone; a
        batch that cannot be sent is sent entry by entry."""
        done: list[bool | None] = [None] * len(entries)
        jobs: list[tuple[int, RetainJob]] = []
        for i, entry in enumerate(entries):
            try:
                jobs.append((i, await self._job(lane, ctx, manifest, entry)))
            except Exception as exc:
                done[i] = self._dead_letter(lane, manifest, entry, f"could not prepare: {type(exc).__name__}: {exc}")
        if jobs:
            async with self._slots:
                started = time.perf_counter()
                try:
                    codes: list[int | None] | None = await self._service(jobs[0][1]).retain_batch(
                        [(j.metadata, j.entry) for _, j in jobs])
                    error = ""
                except RetryableRetainError as exc:
                    codes, error = [None] * len(jobs), str(exc)
                    _note_retry_after(lane, exc)
                except BatchUnsupported:
                    raise
                except Exception:  # e.g. one entry that serialises alone but not inside the batch
                    codes = None
            if codes is None:
                singles = await asyncio.gather(*(self._send_one(lane, ctx, manifest, entries[i]) for i, _ in jobs))
                for (i, _), ok in zip(jobs, singles):
                    done[i] = ok
            else:
                latency_ms = (time.perf_counter() - started) * 1000
                for (i, job), code in zip(jobs, codes):
                    done[i] = self._report(lane, manifest, job, code, error, latency_ms, batch_size=len(jobs))
        return [bool(d) for d in done]

    async def _send_one(self, lane: Lane, ctx, manifest, entry: LedgerEntry) -> bool:
        try:
            job = await self._job(lane, ctx, manifest, entry)
        except Exception as exc:
            return self._dead_letter(lane, manifest, entry, f"could not prepare: {type(exc).__name__}: {exc}")
        status: int | None = None
        error = ""
        async with self._slots:
            started = time.perf_counter()
            try:
                status = await self._service(job).retain(job.metadata, job.entry)
            except RetryableRetainError as exc:
                error = str(exc)
                _note_retry_after(lane, exc)
            except Exception as exc:  # the payload cannot be serialised, or anything unforeseen
                return self._dead_letter(lane, manifest, entry, f"could not send: {type(exc).__name__}: {exc}")
        return self._report(lane, manifest, job, status, error, (time.perf_counter() - started) * 1000)

    def _report(self, lane: Lane, manifest, job: RetainJob, status: int | None, error: str, latency_ms: float,
                **extra: Any) -> bool:
        """Log one entry's retain; True when acknowledged (2xx) or permanently refused (4xx)."""
        entry_id = job.entry.get("id")
        if status is None or status >= 500 or status == 429:
            lane.last_error = error or f"status {status}"
            self._log(lane, manifest, entry_id, "failed", latency_ms=latency_ms, error=error or f"status {status}",
                      will_retry=True, **extra)
            return False
        ok = 200 <= status < 300
        self._log(lane, manifest, entry_id, "succeeded" if ok else "failed", status_code=status,
                  latency_ms=latency_ms, removed=job.metadata.get("policy_removed", 0),
                  error=None if ok else f"refused with status {status}", **extra)
        return True

    def _log(self, lane: Lane, manifest, entry_id: str | None, status: str, **fields: Any) -> None:
        """How one entry's retain went: its `memory_op` line (CONTRACT §11)."""
        self.telemetry.memory_op(agent_id=lane.agent_id, service=getattr(manifest, "service", None), op="retain",
                                 status=status, entry_id=entry_id, **fields)

    def _dead_letter(self, lane: Lane, manifest, entry: Any, reason: str) -> bool:
        """Park one entry that cannot be delivered (it could not be scrubbed or serialised, or the
        service's answer made no sense), log it, and go on with the next."""
        entry_id = entry.get("id") if isinstance(entry, dict) else None
        self.dead_letters += 1
        if entry_id:
            self.dead_ids.add(entry_id)
        self._log(lane, manifest, entry_id, "failed", error=f"dead-lettered: {reason}"[:300], dead_letter=True)
        self._park(lane.agent_id, entry_id, reason)
        return True

    def _park(self, agent_id: str, entry_id: str | None, reason: str) -> None:
        """Where a dead letter goes: `retain.dead.jsonl` beside the agent's ledger."""
        try:
            append_dead_letter(self.history_root, agent_id, entry_id, reason)
        except OSError as exc:
            self.telemetry.error("dead_letter_not_written", agent_id=agent_id, entry_id=entry_id,
                                 error=type(exc).__name__)


def _note_retry_after(lane: Lane, exc: RetryableRetainError) -> None:
    if exc.retry_after is not None:
        lane.retry_after = max(lane.retry_after, exc.retry_after)


def retain_metadata(ctx, entry: LedgerEntry) -> dict[str, Any]:
    """The `metadata` every retain of `entry` carries (CONTRACT §6), live or backfilled: a memory
    rebuilt from the ledger is scoped, dated and attributed as the live one was."""
    fmt = format_for_path(entry.get("path", ""))
    project = entry.get("project") if isinstance(entry.get("project"), str) else None
    return ctx.memory_metadata(fmt.name if fmt is not None else "openai", entry.get("requested_model"),
                               entry.get("session_id"), project)


async def retain_job(redactor: Redactor, agent_id: str, ctx, manifest, entry: LedgerEntry, *,
                     op: str = "retain", extra: dict[str, Any] | None = None) -> RetainJob:
    """One entry ready to send: live metadata (plus `extra`), the person's words and what was done
    (coding/for_memory.py: scaffolding set aside, tool output compacted), scrubbed by the operator's rules."""
    meta = {**retain_metadata(ctx, entry), **(extra or {})}
    entry = for_memory(entry)
    return await scrub_job_async(redactor, RetainJob(agent_id, ctx.metadata.pod, manifest, entry, meta, op=op))
