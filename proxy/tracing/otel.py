"""The OpenTelemetry SDK behind `Tracing` (imported only when an OTLP endpoint is set).

Spans go to the OTLP/HTTP exporter through the SDK's batch processor: its own thread sends them,
so a turn only creates spans. Every setting is the SDK's standard environment: the endpoint and
headers (`OTEL_EXPORTER_OTLP_*`), the service name and resource (`OTEL_SERVICE_NAME`,
`OTEL_RESOURCE_ATTRIBUTES`), the sampler (`OTEL_TRACES_SAMPLER`), the batching (`OTEL_BSP_*`).

What is recorded follows the GenAI semantic conventions: the provider call is a client span
`chat {model}` with `gen_ai.operation.name`, `gen_ai.provider.name` (and the older `gen_ai.system`),
`gen_ai.request.model`, `gen_ai.response.model`, `gen_ai.usage.input_tokens` / `output_tokens`.
Message content is left out unless `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` opts in,
and even then it passes the redactor first: a secret never reaches a collector.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace import SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from yarl import URL

from memplane_core.telemetry import MemoryOp
from memplane_core.turn_text import assistant_text

from . import Tracing

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
_CAPTURE_ON = {"true", "1", "span_only", "span_and_event"}
MAX_CONTENT_CHARS = 16_000  # one attribute, not a second ledger
_SCOPE = "memplane.proxy"


@dataclass
class _Turn:
    """The spans of the turn in progress (a context variable: each turn's task sees its own)."""

    root: Any
    upstream: Any = None


_TURN: contextvars.ContextVar[_Turn | None] = contextvars.ContextVar("memplane_trace_turn", default=None)


class _Span:
    """One span as a context manager (sync and async), current while it is open."""

    def __init__(self, tracer: Any, name: str, *, kind: SpanKind = SpanKind.INTERNAL,
                 attributes: dict[str, Any] | None = None, parent: Any = None) -> None:
        self.tracer, self.name, self.kind, self.attributes, self.parent = tracer, name, kind, attributes, parent
        self.span: Any = None
        self._token: Any = None

    def __enter__(self) -> _Span:
        self.span = self.tracer.start_span(self.name, context=self.parent, kind=self.kind, attributes=self.attributes)
        self._token = otel_context.attach(trace.set_span_in_context(self.span))
        self.entered()
        return self

    def entered(self) -> None:
        pass

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        try:
            if exc is not None:
                self.failed(exc)
        finally:
            self.leaving()
            otel_context.detach(self._token)
            self.span.end()

    def failed(self, exc: BaseException) -> None:
        self.span.set_attribute("error.type", type(exc).__qualname__)
        self.span.set_status(Status(StatusCode.ERROR, type(exc).__qualname__))

    def leaving(self) -> None:
        pass

    async def __aenter__(self) -> _Span:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> None:
        self.__exit__(*exc)


class _TurnSpan(_Span):
    """The root: marks the turn current for its steps; a refusal's status, not its traceback."""

    def entered(self) -> None:
        self._turn_token = _TURN.set(_Turn(self.span))

    def leaving(self) -> None:
        _TURN.reset(self._turn_token)

    def failed(self, exc: BaseException) -> None:
        status = getattr(exc, "status", None)  # ProxyError: an answer in the provider's format
        if isinstance(status, int):
            self._status(status)
        else:
            super().failed(exc)

    def _status(self, status: int) -> None:
        self.span.set_attribute("http.response.status_code", status)
        if status >= 400:
            self.span.set_attribute("error.type", str(status))
        if status >= 500:
            self.span.set_status(Status(StatusCode.ERROR))

    def answered(self, response: Any) -> Any:
        self._status(int(response.status))
        return response


class _UpstreamSpan(_Span):
    def entered(self) -> None:
        turn = _TURN.get()
        if turn is not None:
            turn.upstream = self.span


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _request_attributes(provider: str, body: Mapping[str, Any], url: Any) -> dict[str, Any]:
    attrs: dict[str, Any] = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": provider,
                             "gen_ai.system": provider}
    if isinstance(body.get("model"), str):
        attrs["gen_ai.request.model"] = body["model"]
    for key in ("max_tokens", "max_completion_tokens", "max_output_tokens"):
        if _number(body.get(key)):
            attrs["gen_ai.request.max_tokens"] = body[key]
            break
    for key in ("temperature", "top_p"):
        if _number(body.get(key)):
            attrs[f"gen_ai.request.{key}"] = body[key]
    attrs["memplane.stream"] = bool(body.get("stream"))
    try:
        target = URL(str(url))
        if target.host:
            attrs["server.address"] = target.host
        if target.port:
            attrs["server.port"] = target.port
    except ValueError:
        pass
    return attrs


def _request_messages(request: Any) -> Any:
    """The messages of a request in any of the three formats (system first, when separate)."""
    if not isinstance(request, dict):
        return None
    found = [{"role": "system", "content": request["system"]}] if request.get("system") is not None else []
    if request.get("instructions") is not None:
        found.append({"role": "system", "content": request["instructions"]})
    for key in ("messages", "input"):
        if isinstance(request.get(key), list):
            return found + request[key]
        if isinstance(request.get(key), str):
            return found + [{"role": "user", "content": request[key]}]
    return found or None


class OtelTracing(Tracing):
    """Spans recorded by the SDK and exported over OTLP/HTTP."""

    enabled = True

    def __init__(self, redactor: Any, env: Mapping[str, str]) -> None:
        resource = Resource.create({} if env.get("OTEL_SERVICE_NAME") else {"service.name": "memplane"})
        self.provider = TracerProvider(resource=resource)  # its sampler: OTEL_TRACES_SAMPLER
        endpoint = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
                    or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip().rstrip("/") + "/v1/traces")
        # the endpoint as `enabled_by` read it; headers, timeout, compression: the exporter's own OTEL_* reading
        self.provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint)))
        self.tracer = self.provider.get_tracer(_SCOPE)
        self.redactor = redactor
        self.capture = env.get(CAPTURE_CONTENT, "").strip().lower() in _CAPTURE_ON
        self.propagator = TraceContextTextMapPropagator()

    @staticmethod
    def _under_turn() -> Any:
        turn = _TURN.get()
        return trace.set_span_in_context(turn.root) if turn is not None else None

    def turn(self, fmt_name: str, provider: str, request: Any) -> Any:
        parent = self.propagator.extract(request.headers)  # an agent's own trace continues (W3C traceparent)
        return _TurnSpan(self.tracer, "memplane.turn", kind=SpanKind.SERVER, parent=parent, attributes={
            "http.request.method": request.method, "url.path": request.path, "memplane.format": fmt_name,
            "gen_ai.provider.name": provider})

    def agent(self, agent_id: str, turn_id: str) -> None:
        turn = _TURN.get()
        if turn is not None:
            turn.root.set_attributes({"memplane.agent.id": agent_id, "memplane.turn.id": turn_id})

    def step(self, name: str) -> Any:
        return _Span(self.tracer, name, parent=self._under_turn())

    def upstream(self, provider: str, body: dict[str, Any], url: Any) -> Any:
        attrs = _request_attributes(provider, body, url)
        name = f"chat {attrs['gen_ai.request.model']}" if "gen_ai.request.model" in attrs else "chat"
        return _UpstreamSpan(self.tracer, name, kind=SpanKind.CLIENT, attributes=attrs, parent=self._under_turn())

    def ledger_write(self, entry: Mapping[str, Any]) -> Any:
        turn = _TURN.get()
        call = turn.upstream if turn is not None else None
        if call is not None and call.is_recording():
            call.set_attributes(self._answer_attributes(entry))
        return _Span(self.tracer, "memplane.ledger.write", parent=self._under_turn(),
                     attributes={"memplane.ledger.entry_id": str(entry.get("id") or ""),
                                 "memplane.agent.id": str(entry.get("claw_id") or "")})

    def _answer_attributes(self, entry: Mapping[str, Any]) -> dict[str, Any]:
        attrs: dict[str, Any] = {"http.response.status_code": int(entry.get("status_code") or 0)}
        if isinstance(entry.get("effective_model"), str):
            attrs["gen_ai.response.model"] = entry["effective_model"]
        usage = entry.get("usage") if isinstance(entry.get("usage"), dict) else {}
        if _number(usage.get("prompt_tokens")):
            attrs["gen_ai.usage.input_tokens"] = usage["prompt_tokens"]
        if _number(usage.get("completion_tokens")):
            attrs["gen_ai.usage.output_tokens"] = usage["completion_tokens"]
        response = entry.get("response") if isinstance(entry.get("response"), dict) else {}
        doc = response.get("json")
        if isinstance(doc, dict) and isinstance(doc.get("id"), str):
            attrs["gen_ai.response.id"] = doc["id"]
        if response.get("incomplete"):
            attrs["error.type"] = str(response["incomplete"])
        if self.capture:
            attrs.update(self._content(entry))
        return attrs

    def _content(self, entry: Mapping[str, Any]) -> dict[str, str]:
        """Opted in: the messages sent (memories included) and the answer, redacted, capped."""
        def scrubbed(value: Any) -> str:
            text = orjson.dumps(value).decode()
            if self.redactor is not None:
                text = self.redactor.text(text)[0]
            return text[:MAX_CONTENT_CHARS]
        sent = _request_messages(entry.get("request_effective"))
        answer = [{"role": "assistant", "parts": [{"type": "text", "content": assistant_text(dict(entry))}]}]
        return {"gen_ai.input.messages": scrubbed(sent or []), "gen_ai.output.messages": scrubbed(answer)}

    def memory_op(self, event: MemoryOp) -> None:
        attrs = {k: v for k, v in {
            "memplane.agent.id": event.agent_id, "memplane.memory.service": event.service,
            "memplane.memory.op": event.op, "memplane.memory.status": event.status,
            "memplane.memory.latency_ms": event.latency_ms, "memplane.memory.status_code": event.status_code,
            "memplane.memory.blocks": event.blocks, "memplane.memory.bytes": event.bytes_,
            "memplane.memory.removed": event.removed, "memplane.memory.tokens": event.tokens or None,
            "memplane.memory.ranking": event.extra.get("ranking"), "memplane.memory.error": event.error,
            "memplane.memory.reused": event.extra.get("reused"),
        }.items() if v is not None}
        current = trace.get_current_span()
        if event.op == "recall" and current.is_recording() and getattr(current, "name", "") == "memplane.recall":
            current.set_attributes(attrs)
            if event.status in ("failed", "timed_out"):
                current.set_status(Status(StatusCode.ERROR, event.status))
            return
        # another op (a retain delivery, a store, a forget): a span of its own, dated by its latency
        end = time.time_ns()
        start = end - int((event.latency_ms or 0) * 1_000_000)
        parent = self._under_turn() or otel_context.Context()  # off a turn: a trace of its own
        span = self.tracer.start_span(f"memplane.{event.op}", context=parent, attributes=attrs, start_time=start)
        if event.status in ("failed", "timed_out"):
            span.set_status(Status(StatusCode.ERROR, event.status))
        span.end(end_time=end)

    def shutdown(self) -> None:
        self.provider.shutdown()
