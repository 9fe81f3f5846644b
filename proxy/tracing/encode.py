"""OTLP protobuf for the exporting process, built from span records in C as far as it can be.

The SDK's encoder (`encode_spans`) builds a Python `ReadableSpan` and then a protobuf message per
attribute for every span: on this host ~200 µs a span, more than a turn's whole tracing budget.
Here a span is one `spans.add(...)` of its scalar fields, and its attributes are merged in from
bytes: each (key, value) pair is serialized once, as a one-attribute `Span`, and kept; protobuf's
own parser (upb, in C) merges the concatenation, since repeated fields of concatenated messages
append. The messages are opentelemetry-proto's own, so the bytes are the OTLP the SDK would send.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, InstrumentationScope, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

CACHE_LIMIT = 8192  # attribute (key, value) pairs kept serialized; ids and latencies rarely repeat
_FLAG_HAS_REMOTE = 0x100  # SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK
_FLAG_IS_REMOTE = 0x200  # SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK


def any_value(value: Any) -> AnyValue | None:
    """An attribute value as OTLP's AnyValue; None for a type OTLP attributes cannot carry."""
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value) if -(1 << 63) <= value < 1 << 63 else AnyValue(string_value=str(value))
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, str):
        return AnyValue(string_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, (list, tuple)):
        items = [v for v in (any_value(x) for x in value) if v is not None]
        return AnyValue(array_value=ArrayValue(values=items))
    return None


def _attribute(key: str, value: Any) -> bytes:
    encoded = any_value(value)
    if encoded is None:
        return b""
    return Span(attributes=[KeyValue(key=key, value=encoded)]).SerializeToString()


_STATUSES = [Status(code=c) for c in (0, 1, 2)]  # a description only with ERROR (the spec)


class Encoder:
    """Span records (otel.py's tuples) to one serialized `ExportTraceServiceRequest`."""

    def __init__(self, resource: Mapping[str, Any], scope: str) -> None:
        self.resource = Resource(attributes=[KeyValue(key=k, value=encoded) for k, v in resource.items()
                                             if (encoded := any_value(v)) is not None])
        self.scope = InstrumentationScope(name=scope)
        self.cache: dict[tuple[str, Any], bytes] = {}
        self.states: dict[str, str] = {}

    def _attributes(self, attrs: Mapping[str, Any]) -> bytes:
        cache, parts = self.cache, []
        for pair in attrs.items():
            try:
                part = cache.get(pair)
            except TypeError:  # an unhashable value (a list): encoded each time
                parts.append(_attribute(*pair))
                continue
            if part is None:
                if len(cache) >= CACHE_LIMIT:
                    cache.clear()
                part = cache[pair] = _attribute(*pair)
            parts.append(part)
        return b"".join(parts)

    def encode(self, records: Iterable[tuple]) -> bytes:
        scope_spans = ScopeSpans(scope=self.scope)
        add = scope_spans.spans.add
        for trace_id, span_id, parent_id, remote, name, kind, start, end, attrs, code, desc, state in records:
            flags = _FLAG_HAS_REMOTE | _FLAG_IS_REMOTE if remote else _FLAG_HAS_REMOTE  # as the SDK sets them
            span = add(trace_id=trace_id.to_bytes(16, "big"), span_id=span_id.to_bytes(8, "big"),
                       parent_span_id=parent_id.to_bytes(8, "big") if parent_id else b"",
                       name=name, kind=kind + 1, start_time_unix_nano=start, end_time_unix_nano=end, flags=flags,
                       status=_STATUSES[code] if code != 2 or not desc else Status(code=code, message=desc))
            if state:
                span.trace_state = state
            if attrs:
                span.MergeFromString(self._attributes(attrs))
        request = ExportTraceServiceRequest(resource_spans=[ResourceSpans(resource=self.resource,
                                                                          scope_spans=[scope_spans])])
        return request.SerializeToString()
