"""OpenTelemetry traces of turns, on only when the standard OTEL_* variables ask for them.

`Tracing.from_env()` is a no-op object unless `OTEL_EXPORTER_OTLP_ENDPOINT` (or
`OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`) is set: then, and only then, the OpenTelemetry SDK is
imported (`proxy/tracing/otel.py` records spans, `ship.py` hands them to the exporting process
`export.py`; docs/tracing.md). Off, each span is one shared object whose enter and exit do
nothing, so a proxy without a collector pays neither the SDK's import nor its per-span work.

The turn (`memplane.turn`) is the root; its children are the named steps proxy/turn/ wraps
(`memplane.recall`, the provider call `chat {model}` with GenAI semantic-convention attributes,
`memplane.ledger.write`, `memplane.retain.enqueue`). See DESIGN.md, "Traces".
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from memplane_core.telemetry import MemoryOp

__all__ = ["Tracing", "NOOP", "enabled_by"]


class _NoSpan:
    """A span that is not recorded: a context manager (sync and async) that does nothing."""

    __slots__ = ()

    def __enter__(self) -> _NoSpan:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None

    async def __aenter__(self) -> _NoSpan:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None

    def answered(self, response: Any) -> Any:
        return response


NOOP = _NoSpan()


def enabled_by(env: Mapping[str, str]) -> bool:
    """The standard switches: an OTLP endpoint set, the SDK not disabled, the traces exporter not `none`,
    the sampler not `always_off`."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    if env.get("OTEL_TRACES_EXPORTER", "").strip().lower() == "none":
        return False
    if env.get("OTEL_TRACES_SAMPLER", "").strip().lower() == "always_off":
        return False  # nothing would be sampled: record nothing at all
    return bool(env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
                or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip())


class Tracing:
    """Traces off: every span is `NOOP`. `OtelTracing` (otel.py) records them."""

    enabled = False

    @staticmethod
    def from_env(redactor: Any = None, env: Mapping[str, str] | None = None, telemetry: Any = None) -> Tracing:
        env = os.environ if env is None else env
        if not enabled_by(env):
            return Tracing()
        try:
            from .otel import OtelTracing  # the SDK is imported here and nowhere else
        except ImportError as exc:  # asked for, not installed: say how, and serve without traces
            if telemetry is not None:
                telemetry.warning("tracing_unavailable", error=str(exc),
                                  fix="pip install 'memplane[otel]' (OTEL_EXPORTER_OTLP_ENDPOINT is set)")
            return Tracing()
        if env.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf").strip().lower() != "http/protobuf" \
                and telemetry is not None:
            telemetry.warning("tracing_protocol", error="memplane exports OTLP over HTTP (http/protobuf) only",
                              protocol=env.get("OTEL_EXPORTER_OTLP_PROTOCOL"))
        return OtelTracing(redactor, env, telemetry)

    def turn(self, fmt_name: str, provider: str, request: Any) -> Any:
        """The turn's root span (app.py's turn route); `.answered(response)` notes the status."""
        return NOOP

    def agent(self, agent_id: str, turn_id: str) -> None:
        """Who the turn is for, once authenticated."""

    def step(self, name: str) -> Any:
        """A named step of the turn, a child of the turn's span (recall, retain)."""
        return NOOP

    def upstream(self, provider: str, body: dict[str, Any], url: Any) -> Any:
        """The provider call: a GenAI client span (also an async context manager)."""
        return NOOP

    def ledger_write(self, entry: Mapping[str, Any]) -> Any:
        """The ledger write; the entry's usage and model also complete the provider call's span."""
        return NOOP

    def memory_op(self, event: MemoryOp) -> None:
        """A Telemetry observer: memory op attributes on the recall span, or a span of their own."""

    def shutdown(self) -> None:
        """Flush what is queued (blocking: call it on a thread)."""
