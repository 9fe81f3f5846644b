"""Operator memory operations: forget (remote + local tombstone) and backfill (ledger replay)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from manifests.models import MemoryManifest
from memplane_core.contract import MAX_FORGET_IDS
from memplane_core.ids import is_agent_id
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry

from ..context_store import ContextStore
from ..ledger.redis_streams import open_ledger
from ..retain.call import RetainJob, RetryableRetainError, post_retain, scrub_job_async
from ..retain.sender import retain_job
from ..transport_errors import TransportError, transport_errors


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
    status_code = None
    result = "ok"
    # services refuse more than MAX_FORGET_IDS ids per call (400): a larger request goes in parts
    for i in range(0, len(entry_ids), MAX_FORGET_IDS):
        body = {"agent_id": agent_id, "pod": pod, "entry_ids": entry_ids[i:i + MAX_FORGET_IDS], "reason": reason}
        try:
            with transport_errors():
                async with session.post(manifest.url(manifest.forget), data=orjson.dumps(body),
                                        headers={**manifest.headers(), "Content-Type": "application/json"},
                                        timeout=aiohttp.ClientTimeout(total=manifest.forget.timeout_ms / 1000)) as resp:
                    status_code = resp.status
                    await resp.read()
            if not 200 <= status_code < 300:
                result = f"failed: status {status_code}"
        except TransportError as exc:
            result = f"failed: {exc.name}"
        if result != "ok":
            break
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


async def backfill(contexts: ContextStore, history_root: Path, service: str, *, after: str | None = None,
                   limit: int = 0, agents: tuple[str, ...] = (), url: str | None = None,
                   auth_token: str | None = None, concurrency: int = 8, redactor: Redactor,
                   telemetry: Telemetry, progress: Callable[[int], None] | None = None,
                   total_hint: Callable[[int], None] | None = None, dead_letters: bool = False) -> BackfillStats:
    """Replay ledger entries into the retain endpoint with the ids live retain used, scrubbed by
    the operator's redaction rules as live retain does. With `dead_letters`, only the entries
    delivery parked in `retain.dead.jsonl` are replayed."""
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
            tombstones = ledger.tombstones(agent_id)
            counts = {"sent": 0, "skipped_tombstoned": 0, "failed": 0}
            start = ledger.seek_offset(agent_id, after) if after else 0
            jobs = []
            parked = ledger.dead_letters(agent_id) if dead_letters else None
            for ref in ledger.read(agent_id, start_offset=start):
                entry = ref.entry
                if parked is not None and entry.get("id") not in parked:
                    continue
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

            async def send(entry, manifest=manifest, pod=pod, agent_id=agent_id, counts=counts, ctx=ctx):
                async with sem:
                    try:
                        if ctx is not None:  # the metadata live delivery sent (session, timezone, model)
                            job = await retain_job(redactor, agent_id, ctx, manifest, entry, op="backfill",
                                                   extra={"backfill": True})
                        else:  # a ledger without a context dir (--url): only what the ledger knows
                            job = await scrub_job_async(redactor, RetainJob(agent_id, pod, manifest, entry,
                                                        {"service": service, "backfill": True}, op="backfill"))
                        status = await post_retain(session, job, url=url, token=auth_token)
                        ok = 200 <= status < 300
                    except RetryableRetainError:
                        ok = False
                    except Exception as exc:  # one entry that cannot be sent never stops the rest
                        telemetry.warning("backfill_entry_failed", agent_id=agent_id, entry_id=entry.get("id"),
                                          error=f"{type(exc).__name__}: {exc}"[:200])
                        ok = False
                counts["sent" if ok else "failed"] += 1
                if progress:
                    progress(1)

            await asyncio.gather(*(send(e) for e in jobs))
            telemetry.memory_op(agent_id=agent_id, service=service, op="backfill",
                                status="succeeded" if not counts["failed"] else "failed",
                                latency_ms=(time.perf_counter() - started) * 1000, **counts)
            stats.per_agent[agent_id] = counts
            stats.sent += counts["sent"]
            stats.skipped_tombstoned += counts["skipped_tombstoned"]
            stats.failed += counts["failed"]
    return stats

