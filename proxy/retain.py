"""One retain call to a memory service, and the scrubbing every retained entry goes through.

Delivery order, retries and restarts live in `delivery.py`; backfill reuses these too.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from manifests.models import DEFAULT_WRITE_TIMEOUT_MS, MemoryManifest
from memplane_core.redact import Redactor

from .transport_errors import TransportError, transport_errors


class RetryableRetainError(Exception):
    """A 5xx, 429 or transport failure: worth another try (after `retry_after` seconds when the
    service said so in a Retry-After header)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def _retry_after(value: str | None) -> float | None:
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds <= 3600 else None


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


async def scrub_job_async(redactor: Redactor, job: RetainJob) -> RetainJob:
    """`scrub_job` in a worker thread when the entry is large: one agent's huge turn never stalls
    the event loop every other agent's requests run on."""
    if job.scrubbed or not redactor.is_large(job.entry):
        return scrub_job(redactor, job)
    return await asyncio.to_thread(scrub_job, redactor, job)


async def _post(session: aiohttp.ClientSession, url: str, payload: dict[str, Any], headers: dict[str, str],
                timeout_ms: int) -> tuple[int, bytes]:
    """One POST; a transport failure, 5xx or 429 raises RetryableRetainError."""
    try:
        with transport_errors():
            async with session.post(url, data=orjson.dumps(payload),
                                    headers={"Content-Type": "application/json", **headers},
                                    timeout=aiohttp.ClientTimeout(total=timeout_ms / 1000)) as resp:
                body = await resp.read()
    except TransportError as exc:
        raise RetryableRetainError(exc.name) from None
    if resp.status >= 500 or resp.status == 429:
        raise RetryableRetainError(f"status {resp.status}", _retry_after(resp.headers.get("Retry-After")))
    return resp.status, body


async def post_retain(session: aiohttp.ClientSession, job: RetainJob, *, url: str | None = None,
                      token: str | None = None) -> int:
    """POST one retain; returns the status. Raises RetryableRetainError on transient failure."""
    manifest = job.manifest
    assert manifest.retain is not None or url
    headers = {"Authorization": f"Bearer {token}"} if token else manifest.headers()
    payload = {"agent_id": job.agent_id, "pod": job.pod, "metadata": job.metadata, "entry": job.entry}
    status, _ = await _post(session, url or manifest.url(manifest.retain), payload, headers,
                            manifest.retain.timeout_ms if manifest.retain else DEFAULT_WRITE_TIMEOUT_MS)
    return status


class BatchUnsupported(Exception):
    """The service has no batch endpoint after all (404/405): send those retains one by one."""


async def post_retain_batch(session: aiohttp.ClientSession, jobs: list[RetainJob]) -> list[int]:
    """POST one agent's retains together to `retain.batch_path`; returns each item's status.

    A transport failure, 5xx or 429 for the whole call raises RetryableRetainError (every item
    is retried; services dedupe by entry id). A whole-call 4xx is every item's status.
    """
    first = jobs[0]
    manifest = first.manifest
    url = manifest.batch_url()
    assert url is not None and manifest.retain is not None
    payload = {"agent_id": first.agent_id, "pod": first.pod,
               "items": [{"metadata": job.metadata, "entry": job.entry} for job in jobs]}
    status, body = await _post(session, url, payload, manifest.headers(), manifest.retain.timeout_ms)
    if status in (404, 405):
        raise BatchUnsupported(f"status {status}")
    if not 200 <= status < 300:
        return [status] * len(jobs)
    try:
        codes = [int(r["code"]) for r in orjson.loads(body)["results"]]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise RetryableRetainError("batch answer without per-item results") from None
    if len(codes) != len(jobs):
        raise RetryableRetainError(f"batch answer has {len(codes)} results for {len(jobs)} items")
    return codes
