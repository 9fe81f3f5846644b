"""Operator memory operations: forget (remote + local tombstone) and backfill (ledger replay)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson

from manifests.models import MemoryManifest
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry

from .context_store import ContextStore
from .ledger import Ledger, append_tombstones, read_tombstones
from .retain import RetainJob, RetryableRetainError, post_retain, scrub_job


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
                 *, agents: tuple[str, ...] = (), telemetry: Telemetry | None = None) -> list[ForgetOutcome]:
    """Tombstone locally first (so backfill can never resurrect), then call the service."""
    telemetry = telemetry or Telemetry()
    targets = subscribers(contexts, service, agents)
    if not agents:
        ledger = Ledger(history_root)
        owners = {a for a in targets if any(ref.entry.get("id") in entry_ids for ref in ledger.read(a))}
        targets = {a: m for a, m in targets.items() if a in owners} or targets
    if not targets:
        raise OperatorError(f"no agent subscribes to memory service '{service}'; name one with --agent")
    outcomes = []
    async with aiohttp.ClientSession() as session:
        for agent_id, manifest in targets.items():
            append_tombstones(history_root, agent_id, entry_ids, reason)
            remote = await _remote_forget(session, agent_id, contexts, manifest, entry_ids, reason, telemetry, service)
            outcomes.append(ForgetOutcome(agent_id, len(entry_ids), remote))
    return outcomes


async def _remote_forget(session, agent_id, contexts, manifest, entry_ids, reason, telemetry, service) -> str:
    if manifest is None:
        return "no memory.json for this agent; tombstone recorded locally only"
    if manifest.forget is None:
        return "service declares no forget endpoint; tombstone recorded locally only"
    ctx = contexts.get(agent_id)
    body = {"agent_id": agent_id, "pod": ctx.metadata.pod if ctx else "", "entry_ids": entry_ids, "reason": reason}
    started = time.perf_counter()
    status_code = None
    try:
        async with session.post(manifest.url(manifest.forget), data=orjson.dumps(body),
                                headers={**manifest.headers(), "Content-Type": "application/json"},
                                timeout=aiohttp.ClientTimeout(total=manifest.forget.timeout_ms / 1000)) as resp:
            status_code = resp.status
            await resp.read()
        result = "ok" if 200 <= status_code < 300 else f"failed: status {status_code}"
    except (aiohttp.ClientError, asyncio.TimeoutError, OSError) as exc:
        result = f"failed: {type(exc).__name__}"
    telemetry.memory_op(claw_id=agent_id, service=service, op="forget",
                        status="succeeded" if result == "ok" else "failed", status_code=status_code,
                        latency_ms=(time.perf_counter() - started) * 1000,
                        error=None if result == "ok" else result, entries=len(entry_ids))
    return result


@dataclass
class BackfillStats:
    sent: int = 0
    skipped_tombstoned: int = 0
    failed: int = 0
    per_agent: dict[str, dict[str, int]] = field(default_factory=dict)


async def backfill(contexts: ContextStore, history_root: Path, service: str, *, after: str | None = None,
                   limit: int = 0, agents: tuple[str, ...] = (), url: str | None = None,
                   auth_token: str | None = None, concurrency: int = 8, redactor: Redactor | None = None,
                   telemetry: Telemetry | None = None, progress: Callable[[int], None] | None = None,
                   total_hint: Callable[[int], None] | None = None) -> BackfillStats:
    """Replay ledger entries into the retain endpoint with the ids live retain used."""
    telemetry = telemetry or Telemetry()
    redactor = redactor or Redactor()
    ledger = Ledger(history_root)
    targets = subscribers(contexts, service, agents)
    if url:  # an explicit URL can replay agents that have a ledger but no manifest for the service
        for agent_id in agents or ledger.agents():
            targets.setdefault(agent_id, None)
    if not targets:
        raise OperatorError(f"no agent subscribes to memory service '{service}'; use --agent and --url")
    stats = BackfillStats()
    sem = asyncio.Semaphore(max(1, concurrency))
    async with aiohttp.ClientSession() as session:
        for agent_id, manifest in targets.items():
            if manifest is None and not url:
                raise OperatorError(f"agent '{agent_id}' has no memory.json for '{service}'; pass --url")
            if manifest is not None and manifest.retain is None and not url:
                raise OperatorError(f"service '{service}' declares no retain endpoint for agent '{agent_id}'")
            manifest = manifest or MemoryManifest(service=service, base_url=url or "")
            ctx = contexts.get(agent_id)
            pod = ctx.metadata.pod if ctx else ""
            tombstones = read_tombstones(history_root, agent_id)
            counts = {"sent": 0, "skipped_tombstoned": 0, "failed": 0}
            start = ledger.seek_offset(agent_id, after) if after else 0
            jobs = []
            for ref in ledger.read(agent_id, start_offset=start):
                entry = ref.entry
                if after and str(entry.get("ts", "")) <= after:
                    continue
                if entry.get("id") in tombstones:
                    counts["skipped_tombstoned"] += 1
                    continue
                jobs.append(entry)
                if limit and len(jobs) >= limit:
                    break
            if total_hint:
                total_hint(len(jobs))
            started = time.perf_counter()

            async def send(entry, manifest=manifest, pod=pod, agent_id=agent_id, counts=counts):
                job = scrub_job(redactor, RetainJob(agent_id, pod, manifest, entry,
                                                    {"service": service, "backfill": True}, op="backfill"))
                async with sem:
                    try:
                        status = await post_retain(session, job, url=url, token=auth_token)
                        ok = 200 <= status < 300
                    except RetryableRetainError:
                        ok = False
                counts["sent" if ok else "failed"] += 1
                if progress:
                    progress(1)

            await asyncio.gather(*(send(e) for e in jobs))
            telemetry.memory_op(claw_id=agent_id, service=service, op="backfill",
                                status="succeeded" if not counts["failed"] else "failed",
                                latency_ms=(time.perf_counter() - started) * 1000, **counts)
            stats.per_agent[agent_id] = counts
            stats.sent += counts["sent"]
            stats.skipped_tombstoned += counts["skipped_tombstoned"]
            stats.failed += counts["failed"]
    return stats

