"""Reading memory services' answers: cheap, pure, and lenient where the contract says readers are.

A recall answer is read on every turn's hot path. The usual answer validates into the contract's
`RecalledMemory` in one strict pass (8 memories: ~9 µs, measured; `model_construct` item by item
was slower, ~24 µs); an odd one (a bool score, a number for a kind, an item that is no object) is
read item by item, keeping what policy can use, as the proxy always did.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import TypeAdapter, ValidationError

from memplane_core.contract import RecalledMemory

from .errors import RetryableRetainError

MAX_RECALL_BYTES = 16 * 1024
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")
_MEMORIES = TypeAdapter(list[RecalledMemory])


def deadline_ms(timeout_ms: int) -> int:
    """What the service is told it has (`deadline_ms`, CONTRACT §5): the recall timeout less a
    margin for the answer's way back — network, JSON, and on a busy host the wake-ups of two
    processes that wait for a core (bench.busy: with one core burning beside a loaded machine,
    answers overshot a 225 ms deadline by more than 75 ms; words in time beat vectors too late).
    Half: on a 2-core AVX2-only host with one core burning, a 180 ms deadline gave a recall p99 of
    172 ms, 150 ms gave 140 ms with the same quality (bench/results/HISTORY.md, "Ninth session")."""
    return max(0, timeout_ms - max(10, timeout_ms // 2))


@dataclass
class RecallOutcome:
    status: str  # succeeded | failed | timed_out
    memories: list[RecalledMemory] = field(default_factory=list)
    status_code: int | None = None
    error: str | None = None
    latency_ms: float = 0.0
    ranking: str | None = None  # which ranking the service says answered (e.g. "lexical: deadline")
    deadline_ms: int | None = None  # what the service was told it had (deadlines.py)
    degraded: str | None = None  # the service answered with less than its usual ranking, and why (CONTRACT §5)

    @property
    def said(self) -> str:
        """The turn's `X-Memplane-Recall` status: `degraded` for an answer the service says is less
        than its usual ranking (words only at the deadline, shed), so it never passes for a success."""
        return "degraded" if self.status == "succeeded" and self.degraded else self.status

    def event_fields(self) -> dict[str, Any]:
        """What the recall's memory_op event adds about the service's answer: ranking, degraded."""
        out: dict[str, Any] = {"ranking": self.ranking} if self.ranking else {}
        if self.degraded:
            out["degraded"] = self.degraded
        return out


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _lenient(item: dict[str, Any]) -> RecalledMemory:
    text, score = item.get("text"), item.get("score")
    return RecalledMemory.model_construct(
        text=text if isinstance(text, str) else "",  # policy drops it as blank
        score=float(score) if isinstance(score, (int, float)) and not isinstance(score, bool) else None,
        kind=_str_or_none(item.get("kind")), source=_str_or_none(item.get("source")),
        ts=_str_or_none(item.get("ts")), id=_str_or_none(item.get("id")), title=_str_or_none(item.get("title")),
        # provenance survives an odd answer: a tool's words read leniently are still a tool's
        origin=_str_or_none(item.get("origin")), writer=_str_or_none(item.get("writer")),
        bounded=item.get("bounded") if isinstance(item.get("bounded"), bool) else None)


def recalled_memories(items: list[Any]) -> list[RecalledMemory]:
    """The typed items of a recall answer's `memories` (anything but an object is passed over)."""
    try:
        return _MEMORIES.validate_python(items, strict=True)
    except ValidationError:
        return [_lenient(m) for m in items if isinstance(m, dict)]


def read_recall(status: int, body: bytes | None) -> RecallOutcome:
    """Anything but a small, valid 2xx JSON answer with a `memories` list means "no memories"."""
    if not 200 <= status < 300:
        return RecallOutcome("failed", status_code=status, error=f"status {status}")
    if body is None:
        return RecallOutcome("failed", status_code=status, error=f"response over {MAX_RECALL_BYTES} bytes")
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return RecallOutcome("failed", status_code=status, error="invalid JSON")
    memories = doc.get("memories") if isinstance(doc, dict) else None
    if not isinstance(memories, list):
        return RecallOutcome("failed", status_code=status, error="no memories list")
    ranking = doc.get("ranking")
    return RecallOutcome("succeeded", recalled_memories(memories), status_code=status,
                         ranking=_UNPRINTABLE.sub("?", ranking[:80]) if isinstance(ranking, str) else None,
                         degraded=degraded_reason(doc.get("degraded")))


DEGRADED_REASONS = frozenset({"lexical", "shed", "loading"})


def degraded_reason(value: Any) -> str | None:
    """A service's `degraded` (CONTRACT §5) as a closed set, since it becomes a metric label: its
    known words, `other` for any other truthy value, None for absent, empty, false or null."""
    if not value:
        return None
    return value if isinstance(value, str) and value in DEGRADED_REASONS else "other"


def retry_after(value: str | None) -> float | None:
    """A Retry-After header in seconds (0 to an hour); a date or anything else is no advice."""
    try:
        seconds = float(value) if value is not None else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds <= 3600 else None


def batch_codes(body: bytes, items: int) -> list[int]:
    """Each item's status from a batch retain's answer; one that does not say is worth a retry."""
    try:
        codes = [int(r["code"]) for r in orjson.loads(body)["results"]]
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        raise RetryableRetainError("batch answer without per-item results") from None
    if len(codes) != items:
        raise RetryableRetainError(f"batch answer has {len(codes)} results for {items} items")
    return codes
