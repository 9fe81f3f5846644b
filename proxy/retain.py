"""One retain call to a memory service, and the scrubbing every retained entry goes through.

Delivery order, retries and restarts live in `delivery.py`; backfill reuses these too.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

import aiohttp
import orjson

from manifests.models import MemoryManifest

from .redact import Redactor


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
    assert url is not None
    payload = {"agent_id": first.agent_id, "pod": first.pod,
               "items": [{"metadata": job.metadata, "entry": job.entry} for job in jobs]}
    headers = {"Content-Type": "application/json", **manifest.headers()}
    timeout = aiohttp.ClientTimeout(total=manifest.retain.timeout_ms / 1000)
    try:
        async with session.post(url, data=orjson.dumps(payload), headers=headers, timeout=timeout) as resp:
            body = await resp.read()
            if resp.status in (404, 405):
                raise BatchUnsupported(f"status {resp.status}")
            if resp.status >= 500 or resp.status == 429:
                raise RetryableRetainError(f"status {resp.status}")
            if not 200 <= resp.status < 300:
                return [resp.status] * len(jobs)
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        raise RetryableRetainError(type(exc).__name__) from None
    try:
        results = orjson.loads(body)["results"]
        codes = [int(r["code"]) for r in results]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise RetryableRetainError("batch answer without per-item results") from None
    if len(codes) != len(jobs):
        raise RetryableRetainError(f"batch answer has {len(codes)} results for {len(jobs)} items")
    return codes

