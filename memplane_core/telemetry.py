"""Structured JSON telemetry: one `memory_op` line per memory operation (CONTRACT §11).

The logger is built per process and passed in explicitly, so tests and the demo can point
it at their own stream instead of stdout.
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import IO, Any

import orjson


class JsonLines:
    """A JSON-lines logger: `info(event, **fields)` writes `{...fields, "event", "level", "ts"}`
    as one line and flushes it. The same lines structlog's JSON pipeline wrote (fields in the
    order given, then event, level and an ISO UTC time; an `exc_info` becomes `exception`), for a
    fifth of the CPU: a turn writes two or three of them, and the processor chain was ~3% of the
    proxy's CPU a turn with 32 in flight."""

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream  # None: whatever sys.stdout is at each line (as structlog's PrintLogger did)
        self._lock = threading.Lock()  # retain and recall threads may log too

    def _emit(self, level: str, event: str, fields: dict[str, Any]) -> None:
        exc_info = fields.pop("exc_info", None)
        fields["event"] = event
        fields["level"] = level
        fields["ts"] = datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")
        if exc_info:
            fields["exception"] = _exception_text(exc_info)
        line = orjson.dumps(fields, default=str).decode() + "\n"
        stream = self._stream or sys.stdout
        with self._lock:
            stream.write(line)
            stream.flush()

    def debug(self, event: str, **fields: Any) -> None:
        self._emit("debug", event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._emit("error", event, fields)


def _exception_text(exc_info: Any) -> str:
    if isinstance(exc_info, BaseException):
        return "".join(traceback.format_exception(type(exc_info), exc_info, exc_info.__traceback__)).rstrip("\n")
    if isinstance(exc_info, tuple):
        return "".join(traceback.format_exception(*exc_info)).rstrip("\n")
    return traceback.format_exc().rstrip("\n")


def make_logger(stream: IO[str] | None = None) -> JsonLines:
    """A JSON-lines logger writing one line per event to `stream` (stdout by default)."""
    return JsonLines(stream)


@dataclass(frozen=True)
class MemoryOp:
    """One memory operation: what the `memory_op` log line says (`wire()`, CONTRACT §11) and what
    observers such as the proxy's metrics read, by name instead of by log key."""

    agent_id: str
    service: str
    op: str
    status: str
    latency_ms: float | None = None
    status_code: int | None = None
    blocks: int | None = None
    bytes_: int | None = None
    removed: int | None = None
    error: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        """Estimated tokens injected (recall)."""
        value = self.extra.get("memory_tokens")
        return value if isinstance(value, int) else 0

    @property
    def redactions(self) -> dict[str, int]:
        return dict(self.extra.get("redactions") or {})

    @property
    def policy_reasons(self) -> dict[str, int]:
        return dict(self.extra.get("policy_reasons") or {})

    @property
    def dead_letter(self) -> bool:
        return bool(self.extra.get("dead_letter"))

    def wire(self) -> dict[str, Any]:
        event: dict[str, Any] = {"type": "memory_op", "claw_id": self.agent_id, "memory_service": self.service,
                                 "memory_op": self.op, "memory_status": self.status}
        if self.status_code is not None:
            event["status_code"] = self.status_code
        if self.latency_ms is not None:
            event["latency_ms"] = round(self.latency_ms, 3)
        if self.blocks is not None:
            event["memory_blocks"] = self.blocks
        if self.bytes_ is not None:
            event["memory_bytes"] = self.bytes_
        if self.removed is not None:
            event["memory_removed"] = self.removed
        if self.error:
            event["error"] = self.error
        event.update(self.extra)
        return event


@dataclass
class Telemetry:
    """Emits memory_op and request events through one JSON-lines logger."""

    log: Any = field(default_factory=make_logger)
    # called with every memory_op event (the proxy's Prometheus metrics listen here)
    observers: list[Callable[[MemoryOp], None]] = field(default_factory=list)

    def memory_op(self, *, agent_id: str, service: str, op: str, status: str, latency_ms: float | None = None,
                  status_code: int | None = None, blocks: int | None = None, bytes_: int | None = None,
                  removed: int | None = None, error: str | None = None, **extra: Any) -> None:
        event = MemoryOp(agent_id, service, op, status, latency_ms, status_code, blocks, bytes_, removed, error,
                         extra)
        self.log.info("memory_op", **event.wire())
        for observe in self.observers:
            observe(event)

    def request(self, **fields: Any) -> None:
        self.log.info("request", type="request", **_wire(fields))

    def warning(self, event: str, **fields: Any) -> None:
        self.log.warning(event, **_wire(fields))

    def info(self, event: str, **fields: Any) -> None:
        self.log.info(event, **_wire(fields))

    def error(self, event: str, **fields: Any) -> None:
        self.log.error(event, **_wire(fields))


def _wire(fields: dict[str, Any]) -> dict[str, Any]:
    """Log lines name the agent `claw_id`, as the contract's memory_op events do (CONTRACT §11)."""
    if "agent_id" in fields:
        fields["claw_id"] = fields.pop("agent_id")
    return fields
