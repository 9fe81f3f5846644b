"""Structured JSON telemetry: one `memory_op` line per memory operation (CONTRACT §11).

The logger is built per process and passed in explicitly, so tests and the demo can point
it at their own stream instead of stdout.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any

import orjson
import structlog


def _orjson_dumps(obj: Any, **_: Any) -> str:
    return orjson.dumps(obj, default=str).decode()


def make_logger(stream: IO[str] | None = None) -> structlog.typing.FilteringBoundLogger:
    """A JSON structlog logger writing one line per event to `stream` (stdout by default)."""
    return structlog.wrap_logger(
        structlog.PrintLogger(stream or sys.stdout),
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=_orjson_dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(0),
    )


@dataclass
class Telemetry:
    """Emits memory_op and request events through one structlog logger."""

    log: Any = field(default_factory=make_logger)
    # called with every memory_op event (the proxy's Prometheus metrics listen here)
    observers: list[Callable[[dict[str, Any]], None]] = field(default_factory=list)

    def memory_op(
        self,
        *,
        agent_id: str,
        service: str,
        op: str,
        status: str,
        latency_ms: float | None = None,
        status_code: int | None = None,
        blocks: int | None = None,
        bytes_: int | None = None,
        removed: int | None = None,
        error: str | None = None,
        **extra: Any,
    ) -> None:
        event: dict[str, Any] = {
            "type": "memory_op",
            "claw_id": agent_id,
            "memory_service": service,
            "memory_op": op,
            "memory_status": status,
        }
        if status_code is not None:
            event["status_code"] = status_code
        if latency_ms is not None:
            event["latency_ms"] = round(latency_ms, 3)
        if blocks is not None:
            event["memory_blocks"] = blocks
        if bytes_ is not None:
            event["memory_bytes"] = bytes_
        if removed is not None:
            event["memory_removed"] = removed
        if error:
            event["error"] = error
        event.update(extra)
        self.log.info("memory_op", **event)
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
