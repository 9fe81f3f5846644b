"""aiohttp logs a refused header with its first bytes (an agent's token, say): keep the event, drop
the value. Installed by whoever builds a server (`build_app`, the CLI's runner), never on import."""

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


def quiet_header_values() -> None:
    """Install the filter on aiohttp's server log, once."""
    server_log = logging.getLogger("aiohttp.server")
    if not any(isinstance(f, _NoHeaderValues) for f in server_log.filters):
        server_log.addFilter(_NoHeaderValues())
