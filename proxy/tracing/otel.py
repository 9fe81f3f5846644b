"""Traces of turns, recorded cheaply on the loop and exported by another process (OTEL_* set).

The SDK's own spans cost a turn most of its time on this proxy (a lock, attribute validation and
a sampler call per span, then protobuf encoding and HTTP under the same GIL): issue 52 measured
~40 % of the throughput at 32 in flight. So a span here is a small object that, when it ends,
becomes one tuple (ids, name, kind, times, attributes, status) handed to `ship.Shipper`; the
exporting process (`export.py`) rebuilds the SDK's `ReadableSpan`s from the tuples and sends them
with the SDK's `OTLPSpanExporter`. What reaches the collector is the same OTLP it was.

Sampling is the SDK's: `OTEL_TRACES_SAMPLER` / `OTEL_TRACES_SAMPLER_ARG` name one of the SDK's
samplers (`always_on`, `always_off`, `traceidratio`, `parentbased_*`; default
`parentbased_always_on`), asked once per trace at its root, with the caller's W3C `traceparent`
as the parent. A turn's children have that local root as parent, so every spec sampler gives them
the root's answer. A turn that failed or degraded (an error status or exception, a 5xx, a recall
that failed or timed out, an answer cut short) is kept even when the sampler said no: its spans
are held until the turn ends, and the decision is made then (`memplane.trace.kept=failed` says
why); `MEMPLANE_TRACES_KEEP_FAILED=false` turns that off, and `always_off` records nothing.

What is recorded follows the GenAI semantic conventions: the provider call is a client span
`chat {model}` with `gen_ai.operation.name`, `gen_ai.provider.name` (and the older `gen_ai.system`),
`gen_ai.request.model`, `gen_ai.response.model`, `gen_ai.usage.input_tokens` / `output_tokens`.
Message content is left out unless `OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT` opts in,
and even then it passes the redactor first: a secret never reaches a collector.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import random
import time
from collections.abc import Mapping
from typing import Any

import orjson
from opentelemetry.sdk.trace import sampling
from opentelemetry.trace import SpanKind, get_current_span
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from yarl import URL

from memplane_core.telemetry import MemoryOp
from memplane_core.turn_text import assistant_text

from . import Tracing
from .ship import Shipper

CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
KEEP_FAILED = "MEMPLANE_TRACES_KEEP_FAILED"
_CAPTURE_ON = {"true", "1", "span_only", "span_and_event"}
MAX_CONTENT_CHARS = 16_000  # one attribute, not a second ledger
UNSET, OK, ERROR = 0, 1, 2  # StatusCode's values, as the exporter rebuilds them
SERVER, CLIENT, INTERNAL = SpanKind.SERVER.value, SpanKind.CLIENT.value, SpanKind.INTERNAL.value
_RATIO = ("traceidratio", "parentbased_traceidratio")


def sampler_from(env: Mapping[str, str]) -> sampling.Sampler:
    """The SDK's sampler for OTEL_TRACES_SAMPLER / _ARG, read from `env` the way the SDK reads os.environ
    (`sampling._get_from_env_or_default`): an unknown name warns and means `parentbased_always_on`,
    a ratio that is not a number means 1.0."""
    name = env.get("OTEL_TRACES_SAMPLER", "parentbased_always_on").strip().lower()
    known = sampling._KNOWN_SAMPLERS  # the SDK's own table of the spec's names
    if name not in known:
        logging.getLogger(__name__).warning("Couldn't recognize sampler %s.", name)
        name = "parentbased_always_on"
    if name in _RATIO:
        try:
            return known[name](float(env.get("OTEL_TRACES_SAMPLER_ARG", "")))
        except (ValueError, TypeError):
            return known[name](1.0)
    return known[name]


class _Trace:
    """One trace in progress: its ids, the sampler's answer, and its spans until the keep decision."""

    __slots__ = ("trace_id", "remote_parent", "state", "sampled", "failed", "done", "held",
                 "root", "upstream", "recall")

    def __init__(self, trace_id: int, state: str | None, sampled: bool) -> None:
        self.trace_id, self.state, self.sampled = trace_id, state, sampled
        self.remote_parent = 0
        self.failed = self.done = False
        self.held: list[tuple] = []
        self.root: _Span | None = None
        self.upstream: _Span | None = None
        self.recall: _Span | None = None


_TRACE: contextvars.ContextVar[_Trace | None] = contextvars.ContextVar("memplane_trace", default=None)


class _Span:
    """One span as a context manager (sync and async); when it ends, a tuple for the exporter."""

    __slots__ = ("recorder", "trace", "name", "kind", "attrs", "span_id", "parent_id", "start", "code", "desc")

    def __init__(self, recorder: OtelTracing, trace: _Trace, name: str, kind: int, attrs: dict[str, Any],
                 parent_id: int) -> None:
        self.recorder, self.trace, self.name, self.kind, self.attrs = recorder, trace, name, kind, attrs
        self.span_id = random.getrandbits(64) or 1
        self.parent_id = parent_id
        self.start = time.time_ns()
        self.code, self.desc = UNSET, None

    def __enter__(self) -> _Span:
        self.start = time.time_ns()
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc is not None:
            self.failed(exc)
        self.end()

    async def __aenter__(self) -> _Span:
        return self.__enter__()

    async def __aexit__(self, *exc: Any) -> None:
        self.__exit__(*exc)

    def set_attributes(self, attrs: Mapping[str, Any]) -> None:
        self.attrs.update(attrs)

    def error(self, description: str | None = None) -> None:
        self.code, self.desc = ERROR, description
        self.trace.failed = True

    def failed(self, exc: BaseException) -> None:
        self.attrs["error.type"] = type(exc).__qualname__
        self.error(type(exc).__qualname__)

    def end(self, end_time: int | None = None) -> None:
        trace = self.trace
        self.recorder.finished(trace, (
            trace.trace_id, self.span_id, self.parent_id, bool(trace.remote_parent) and self is trace.root,
            self.name, self.kind, self.start, end_time or time.time_ns(), self.attrs, self.code, self.desc,
            trace.state))


class _StepSpan(_Span):
    """A named step; the recall step is where the recall's memory op attributes go."""

    __slots__ = ()

    def __enter__(self) -> _Span:
        self.start = time.time_ns()
        if self.name == "memplane.recall":
            self.trace.recall = self
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if self.trace.recall is self:
            self.trace.recall = None
        super().__exit__(exc_type, exc, tb)


class _UpstreamSpan(_Span):
    __slots__ = ()

    def __enter__(self) -> _Span:
        self.start = time.time_ns()
        self.trace.upstream = self
        return self


class _TurnSpan(_Span):
    """The root: makes its trace current for the turn's steps; a refusal's status, not its traceback."""

    __slots__ = ("token",)

    def __enter__(self) -> _Span:
        self.start = time.time_ns()
        self.token = _TRACE.set(self.trace)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        _TRACE.reset(self.token)
        super().__exit__(exc_type, exc, tb)

    def failed(self, exc: BaseException) -> None:
        status = getattr(exc, "status", None)  # ProxyError: an answer in the provider's format
        if isinstance(status, int):
            self._status(status)
        else:
            super().failed(exc)

    def _status(self, status: int) -> None:
        self.attrs["http.response.status_code"] = status
        if status >= 400:
            self.attrs["error.type"] = str(status)
        if status >= 500:
            self.error()

    def answered(self, response: Any) -> Any:
        self._status(int(response.status))
        return response


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
    attrs.update(_server(str(url)))
    return attrs


@functools.lru_cache(maxsize=256)
def _server(url: str) -> dict[str, Any]:
    """`server.address` / `server.port` of a provider URL (a handful of them: parsed once each)."""
    try:
        target = URL(url)
    except ValueError:
        return {}
    return {k: v for k, v in (("server.address", target.host), ("server.port", target.port)) if v}


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
    """Spans recorded on the loop as tuples and exported over OTLP/HTTP by another process."""

    enabled = True

    def __init__(self, redactor: Any, env: Mapping[str, str], telemetry: Any = None) -> None:
        endpoint = (env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "").strip()
                    or env.get("OTEL_EXPORTER_OTLP_ENDPOINT", "").strip().rstrip("/") + "/v1/traces")
        # the endpoint as `enabled_by` read it; headers, timeout, compression: the exporter's own OTEL_* reading
        self.shipper = Shipper(endpoint, env, telemetry)
        self.sampler = sampler_from(env)
        # without a parent these two always say yes: skip asking (the answer, not the sampler, is spec'd)
        self.root_always = self.sampler in (sampling.ALWAYS_ON, sampling.DEFAULT_ON)
        self.keep_failed = env.get(KEEP_FAILED, "true").strip().lower() not in ("false", "0", "no", "off")
        self.redactor = redactor
        self.capture = env.get(CAPTURE_CONTENT, "").strip().lower() in _CAPTURE_ON
        self.propagator = TraceContextTextMapPropagator()

    # -- the keep decision --

    def _sampled(self, trace_id: int, parent: Any, name: str, kind: SpanKind) -> bool:
        if parent is None and self.root_always:
            return True
        decision = self.sampler.should_sample(parent, trace_id, name, kind)
        return decision.decision.is_sampled()

    def finished(self, trace: _Trace, record: tuple) -> None:
        """A span ended: held with its trace until the root ends, then sent if the trace is kept."""
        if not trace.done:
            if trace.root is None or record[1] == trace.root.span_id:
                self._decide(trace, record)
            else:
                trace.held.append(record)
        elif trace.sampled or trace.failed and self.keep_failed:
            self.shipper.put(record)  # after its turn: sent if the turn was, or if it failed itself

    def _decide(self, trace: _Trace, last: tuple) -> None:
        trace.done = True
        records, trace.held = trace.held, []
        records.append(last)
        if trace.sampled:
            pass
        elif trace.failed and self.keep_failed:
            last[8]["memplane.trace.kept"] = "failed"  # the root's attributes: why a sampled-out trace is here
        else:
            return
        self.shipper.put_all(records)

    # -- the spans a turn opens --

    def turn(self, fmt_name: str, provider: str, request: Any) -> Any:
        attrs = {"http.request.method": request.method, "url.path": request.path, "memplane.format": fmt_name,
                 "gen_ai.provider.name": provider}
        parent, remote, state = None, None, None
        if "traceparent" in request.headers:  # an agent's own trace continues (W3C traceparent)
            parent = self.propagator.extract(request.headers)
            remote = get_current_span(parent).get_span_context()
            if not remote.is_valid:
                parent, remote = None, None
            elif remote.trace_state:
                state = remote.trace_state.to_header()
        trace_id = remote.trace_id if remote is not None else random.getrandbits(128) or 1
        trace = _Trace(trace_id, state, self._sampled(trace_id, parent, "memplane.turn", SpanKind.SERVER))
        span = _TurnSpan(self, trace, "memplane.turn", SERVER, attrs, remote.span_id if remote is not None else 0)
        trace.remote_parent = span.parent_id
        trace.root = span
        return span

    def agent(self, agent_id: str, turn_id: str) -> None:
        trace = _TRACE.get()
        if trace is not None and trace.root is not None:
            trace.root.attrs.update({"memplane.agent.id": agent_id, "memplane.turn.id": turn_id})

    def _child(self, cls: type[_Span], name: str, kind: int, attrs: dict[str, Any]) -> Any:
        trace = _TRACE.get()
        if trace is None:  # off a turn: a trace of its own
            trace_id = random.getrandbits(128) or 1
            trace = _Trace(trace_id, None, self._sampled(trace_id, None, name, SpanKind(kind)))
            return cls(self, trace, name, kind, attrs, 0)
        return cls(self, trace, name, kind, attrs, trace.root.span_id)

    def step(self, name: str) -> Any:
        return self._child(_StepSpan, name, INTERNAL, {})

    def upstream(self, provider: str, body: dict[str, Any], url: Any) -> Any:
        attrs = _request_attributes(provider, body, url)
        name = f"chat {attrs['gen_ai.request.model']}" if "gen_ai.request.model" in attrs else "chat"
        return self._child(_UpstreamSpan, name, CLIENT, attrs)

    def ledger_write(self, entry: Mapping[str, Any]) -> Any:
        trace = _TRACE.get()
        call = trace.upstream if trace is not None else None
        if call is not None:
            call.attrs.update(self._answer_attributes(entry))
            if "error.type" in call.attrs and call.code != ERROR:
                call.trace.failed = True  # an answer cut short: a degraded turn, kept under sampling
        return self._child(_Span, "memplane.ledger.write", INTERNAL, {
            "memplane.ledger.entry_id": str(entry.get("id") or ""),
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
        failed = event.status in ("failed", "timed_out")
        trace = _TRACE.get()
        if event.op == "recall" and trace is not None and trace.recall is not None:
            trace.recall.attrs.update(attrs)
            if failed:
                trace.recall.error(event.status)  # a degraded turn: kept under sampling
            return
        # another op (a retain delivery, a store, a forget): a span of its own, dated by its latency
        end = time.time_ns()
        span = self._child(_Span, f"memplane.{event.op}", INTERNAL, attrs)
        span.start = end - int((event.latency_ms or 0) * 1_000_000)
        if failed:
            span.error(event.status)
        span.end(end)

    def shutdown(self) -> None:
        self.shipper.shutdown()
