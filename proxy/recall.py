"""Pre-turn recall: ask the agent's memory service for memories within a hard timeout.

Anything but a timely, small, valid 2xx JSON answer means "no memories": the agent's request
goes on unchanged and the reason is returned for telemetry.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import orjson

from manifests.models import MemoryManifest

from .transport_errors import TransportError, transport_errors

MAX_RECALL_BYTES = 16 * 1024
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")


def deadline_ms(timeout_ms: int) -> int:
    """What the service is told it has (`deadline_ms`, CONTRACT §5): the recall timeout less a
    margin for the answer's way back — network, JSON, and on a busy host the wake-ups of two
    processes that wait for a core (bench.busy: with one core burning beside a loaded machine,
    answers overshot a 225 ms deadline by more than 75 ms; words in time beat vectors too late)."""
    return max(0, timeout_ms - max(10, timeout_ms * 2 // 5))


@dataclass
class RecallOutcome:
    status: str  # succeeded | failed | timed_out
    memories: list[dict[str, Any]] = field(default_factory=list)
    status_code: int | None = None
    error: str | None = None
    latency_ms: float = 0.0
    ranking: str | None = None  # which ranking the service says answered (e.g. "lexical: deadline")


async def _read_limited(resp: aiohttp.ClientResponse, limit: int) -> bytes | None:
    data = bytearray()
    async for chunk in resp.content.iter_chunked(8192):
        data += chunk
        if len(data) > limit:
            return None
    return bytes(data)


async def call_recall(session: aiohttp.ClientSession, manifest: MemoryManifest,
                      payload: dict[str, Any]) -> RecallOutcome:
    assert manifest.recall is not None
    timeout_s = manifest.recall.timeout_ms / 1000
    started = time.perf_counter()
    payload = {**payload, "deadline_ms": deadline_ms(manifest.recall.timeout_ms)}

    async def run() -> RecallOutcome:
        async with session.post(manifest.url(manifest.recall), data=orjson.dumps(payload),
                                headers={**manifest.headers(), "Content-Type": "application/json"},
                                timeout=aiohttp.ClientTimeout(total=None)) as resp:
            body = await _read_limited(resp, MAX_RECALL_BYTES)
            if not 200 <= resp.status < 300:
                return RecallOutcome("failed", status_code=resp.status, error=f"status {resp.status}")
            if body is None:
                return RecallOutcome("failed", status_code=resp.status,
                                     error=f"response over {MAX_RECALL_BYTES} bytes")
            try:
                doc = orjson.loads(body)
            except orjson.JSONDecodeError:
                return RecallOutcome("failed", status_code=resp.status, error="invalid JSON")
            memories = doc.get("memories") if isinstance(doc, dict) else None
            if not isinstance(memories, list):
                return RecallOutcome("failed", status_code=resp.status, error="no memories list")
            ranking = doc.get("ranking")
            return RecallOutcome("succeeded", [m for m in memories if isinstance(m, dict)],
                                 status_code=resp.status,
                                 ranking=_UNPRINTABLE.sub("?", ranking[:80]) if isinstance(ranking, str) else None)

    try:
        with transport_errors():
            async with asyncio.timeout(timeout_s):  # no extra task per recall, unlike wait_for on 3.11
                outcome = await run()
    except TransportError as exc:
        outcome = (RecallOutcome("timed_out", error=f"no answer within {manifest.recall.timeout_ms} ms")
                   if exc.timed_out else RecallOutcome("failed", error=exc.name))
    outcome.latency_ms = (time.perf_counter() - started) * 1000
    return outcome
