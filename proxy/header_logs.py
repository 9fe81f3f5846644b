"""aiohttp logs a refused header with its first bytes (an agent's token, say), and OpenTelemetry's
W3C parser a malformed `tracestate` member whole (a caller's 8 KB, once a request, printed to stderr
beside the JSON log when nothing else handles it): aiohttp's event is kept without the value; the
parser's is dropped (a malformed trace state is ignored, as a malformed `traceparent` is). Installed by
whoever builds a server (`build_app`, the CLI's runner), never on import."""

from __future__ import annotations

import logging

from aiohttp.http_exceptions import BadHttpMessage


class _NoHeaderValues(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if isinstance(exc, BadHttpMessage):
            record.msg = "refused a malformed or oversized request (%s; header value not logged)"
            record.args = (type(exc).__name__,)
            record.exc_info = None
            record.exc_text = None
        return True


class _NoTraceState(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "w3c" not in str(record.msg)  # the caller's trace state is left out, as a bad traceparent is


def quiet_header_values() -> None:
    """Install the filters on aiohttp's server log and the W3C trace-state parser's, once."""
    for name, kind in (("aiohttp.server", _NoHeaderValues), ("opentelemetry.trace.span", _NoTraceState)):
        log = logging.getLogger(name)
        if not any(isinstance(f, kind) for f in log.filters):
            log.addFilter(kind())
