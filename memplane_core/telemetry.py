"""Structured JSON telemetry: one `memory_op` line per memory operation (CONTRACT §11).

The logger is built per process and passed in explicitly, so tests and the demo can point
it at their own stream instead of stdout.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

import orjson
import structlog


def _orjson_dumps(obj: Any, **_: Any) -> str:
    return orjson.dumps(obj, default=str).decode()


_second: tuple[int, str] = (-1, "")  # the last whole second formatted, and its text (one tuple: threads read it whole)


def _level_and_time(_logger: Any, method: str, event: dict[str, Any]) -> dict[str, Any]:
    """`level` and `ts` (UTC, ISO 8601 to the microsecond, `Z`), as structlog's add_log_level and
    TimeStamper(fmt="iso", utc=True) write them, in one step whose seconds are formatted once per
    second: at every turn's `request` line the two cost more than the rest of the line together."""
    global _second
    event["level"] = "warning" if method == "warn" else method
    sec, ns = divmod(time.time_ns(), 1_000_000_000)
    cached = _second
    if cached[0] != sec:
        cached = _second = (sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)))
    event["ts"] = f"{cached[1]}.{ns // 1000:06d}Z"
    return event


def make_logger(stream: IO[str] | None = None) -> structlog.typing.FilteringBoundLogger:
    """A JSON structlog logger writing one line per event to `stream` (stdout by default)."""
    return structlog.wrap_logger(
        structlog.PrintLogger(stream or sys.stdout),
        processors=[
            _level_and_time,
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=_orjson_dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(0),
        # the bound logger is built once, on its first line, not again for every event
        cache_logger_on_first_use=True,
    )


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
    def degraded(self) -> str | None:
        """Why a recall was answered with less than the service's usual ranking (CONTRACT §5), or None."""
        value = self.extra.get("degraded")
        return value if isinstance(value, str) and value else None

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
    """Emits memory_op and request events through one structlog logger."""

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
