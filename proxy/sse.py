"""Server-sent events: split a byte stream into whole events without re-encoding them."""

from __future__ import annotations

import re

import aiohttp
from aiohttp import web

_BOUNDARY = re.compile(rb"\r\n\r\n|\n\n|\r\r")


class SSESplitter:
    """Feed raw upstream chunks; get back complete events as the exact bytes received."""

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buf += chunk
        events = []
        while True:
            m = _BOUNDARY.search(self._buf)
            if not m:
                break
            events.append(self._buf[: m.end()])
            self._buf = self._buf[m.end():]
        return events

    def flush(self) -> bytes:
        rest, self._buf = self._buf, b""
        return rest


def parse_event(raw: bytes) -> tuple[str | None, str]:
    """(event name, joined data lines) of one raw event."""
    name = None
    data: list[str] = []
    for line in raw.decode("utf-8", "replace").splitlines():
        if line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
        elif line.startswith("event:"):
            name = line[6:].strip()
    return name, "\n".join(data)


async def end_stream(resp: web.StreamResponse, incomplete: str | None,
                     error_event: bytes | None = None) -> web.StreamResponse:
    """Close a relayed stream, unless the client already went away (there is no one to tell). A
    stream that broke off (`incomplete` otherwise) first gets `error_event`, the provider's own
    (errors.stream_error_event), after a blank line that ends any event cut in half: a clean end
    alone would let the SDK take the partial answer for a finished one."""
    if incomplete != "client_disconnected":
        try:
            if incomplete and error_event:
                await resp.write(b"\n\n" + error_event)
            await resp.write_eof()
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            pass
    return resp
