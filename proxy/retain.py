"""Post-turn retain: deliver ledger entries to the memory service off the hot path.

A bounded in-process queue with a few workers and retries with exponential backoff. A full
queue or a dead service drops nothing for good: the ledger line is already written, so
`memplane memory backfill` can replay it (and services dedupe by entry id).
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson
from tenacity import AsyncRetrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from manifests.models import MemoryManifest

from .redact import Redactor
from .telemetry import Telemetry


class RetryableRetainError(Exception):
    """A 5xx, 429 or transport failure: worth another try."""


@dataclass
class RetainJob:
    agent_id: str
    pod: str
    manifest: MemoryManifest
    entry: dict[str, Any]
    metadata: dict[str, Any]
    op: str = "retain"
    scrubbed: bool = False


def scrub_entry(redactor: Redactor, entry: dict[str, Any]) -> tuple[dict[str, Any], Counter[str]]:
    """The entry with secret-shaped values replaced, as a memory backend may see it.

    The id stays the ledger's id: it names the turn, and services dedupe by it.
    """
    counts: Counter[str] = Counter()
    scrubbed = dict(entry)
    for key in ("request_original", "request_effective", "response"):
        if key in entry:
            scrubbed[key], _ = redactor.json(entry[key], counts)
    return scrubbed, counts


def scrub_job(redactor: Redactor, job: RetainJob) -> RetainJob:
    if job.scrubbed:
        return job
    entry, counts = scrub_entry(redactor, job.entry)
    meta = {**job.metadata, "policy_removed": sum(counts.values())}
    if counts:
        meta["redactions"] = dict(counts)
    return RetainJob(job.agent_id, job.pod, job.manifest, entry, meta, job.op, True)


async def post_retain(session: aiohttp.ClientSession, job: RetainJob, *, url: str | None = None,
                      token: str | None = None) -> int:
    """POST one retain; returns the status. Raises RetryableRetainError on transient failure."""
    manifest = job.manifest
    assert manifest.retain is not None or url
    headers = {"Content-Type": "application/json"}
    headers.update({"Authorization": f"Bearer {token}"} if token else manifest.headers())
    payload = {"agent_id": job.agent_id, "pod": job.pod, "metadata": job.metadata, "entry": job.entry}
    timeout = aiohttp.ClientTimeout(total=(manifest.retain.timeout_ms if manifest.retain else 2000) / 1000)
    try:
        async with session.post(url or manifest.url(manifest.retain), data=orjson.dumps(payload),
                                headers=headers, timeout=timeout) as resp:
            await resp.read()
            if resp.status >= 500 or resp.status == 429:
                raise RetryableRetainError(f"status {resp.status}")
            return resp.status
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        raise RetryableRetainError(type(exc).__name__) from None


class RetainQueue:
    def __init__(self, session: aiohttp.ClientSession, telemetry: Telemetry, redactor: Redactor, *,
                 maxsize: int = 10_000, workers: int = 4, attempts: int = 4,
                 backoff_s: float = 0.2, max_backoff_s: float = 5.0) -> None:
        self.session = session
        self.telemetry = telemetry
        self.redactor = redactor
        self.queue: asyncio.Queue[RetainJob] = asyncio.Queue(maxsize=maxsize)
        self.workers = workers
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._worker()) for _ in range(self.workers)]

    def submit(self, job: RetainJob) -> bool:
        """Enqueue without waiting; a full queue is logged as `skipped` (backfill can replay)."""
        try:
            self.queue.put_nowait(job)
            return True
        except asyncio.QueueFull:
            self.telemetry.memory_op(claw_id=job.agent_id, service=job.manifest.service, op="retain",
                                     status="skipped", error="retain queue full; replay with backfill",
                                     entry_id=job.entry.get("id"))
            return False

    async def _worker(self) -> None:
        while True:
            job = await self.queue.get()
            try:
                await self.deliver(job)
            except Exception as exc:  # a worker must never die
                self.telemetry.warning("retain_worker_error", error=type(exc).__name__)
            finally:
                self.queue.task_done()

    async def deliver(self, job: RetainJob) -> bool:
        job = scrub_job(self.redactor, job)
        started = time.perf_counter()
        status_code: int | None = None
        error = None
        try:
            async for attempt in AsyncRetrying(
                stop=stop_after_attempt(self.attempts),
                wait=wait_exponential(multiplier=self.backoff_s, max=self.max_backoff_s),
                retry=retry_if_exception_type(RetryableRetainError),
                reraise=True,
            ):
                with attempt:
                    status_code = await post_retain(self.session, job)
        except RetryableRetainError as exc:
            error = str(exc)
        ok = error is None and status_code is not None and 200 <= status_code < 300
        self.telemetry.memory_op(
            claw_id=job.agent_id, service=job.manifest.service, op=job.op,
            status="succeeded" if ok else "failed", status_code=status_code,
            latency_ms=(time.perf_counter() - started) * 1000,
            removed=job.metadata.get("policy_removed", 0),
            error=error or (None if ok else f"status {status_code}"),
            entry_id=job.entry.get("id"),
        )
        return ok

    async def drain(self, timeout: float) -> None:
        """Wait up to `timeout` for queued retains, then stop the workers."""
        try:
            await asyncio.wait_for(self.queue.join(), timeout)
        except asyncio.TimeoutError:
            pass
        for t in self._tasks:
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
