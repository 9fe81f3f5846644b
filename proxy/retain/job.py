"""One entry ready to retain, and the scrubbing every retained entry goes through.

The call itself is the memory-service client's (`proxy/memory_service/`); delivery order, retries
and restarts live in `delivery.py`, the sending in `sender.py`, which backfill uses too.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass
from typing import Any

from manifests.models import MemoryManifest
from memplane_core.redact import Redactor

from ..ledger.entry import LedgerEntry


@dataclass
class RetainJob:
    agent_id: str
    pod: str
    manifest: MemoryManifest
    entry: LedgerEntry
    metadata: dict[str, Any]
    op: str = "retain"
    scrubbed: bool = False


def scrub_entry(redactor: Redactor, entry: LedgerEntry) -> tuple[LedgerEntry, Counter[str]]:
    """The entry with secret-shaped values replaced, as a memory backend may see it.

    The id stays the ledger's id: it names the turn, and services dedupe by it.
    """
    counts: Counter[str] = Counter()
    scrubbed = entry.copy()
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
