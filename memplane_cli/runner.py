"""Run one or more aiohttp apps in one event loop until SIGTERM/SIGINT, then shut down gracefully.

Graceful means: stop accepting, let in-flight requests and streams finish within the grace
period, then run each app's cleanup (retain drain, ledger close).
"""

from __future__ import annotations

import asyncio
import gc
import random
import signal
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_server import Server

from memplane_core.arrival import ARRIVED
from memplane_core.slow_clients import (
    BODY_EXPIRED,
    DEFAULT_HEADER_TIMEOUT_S,
    HEADER_TIMEOUT_ENV,
    seconds_from_env,
)
from proxy.header_logs import quiet_header_values


_HANDED_OUT: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999


def free_port(host: str = "127.0.0.1") -> int:
    """A port for a server another process will bind later.

    Picked below the kernel's ephemeral range: a port from bind(0) is free again once we close
    it, and any server or client binding port 0 meanwhile (another test, the provider's client)
    could take it before our process starts; below the range only an explicit pick can.
    """
    low, _ = _ephemeral_range()
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(max(1024, low - 20000), low)
        if port in _HANDED_OUT:
            continue
        with socket.socket() as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    with socket.socket() as s:  # a crowded low range: the kernel's pick
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class Site:
    app: web.Application
    host: str
    port: int
    name: str = ""
    reuse_port: bool = False  # one of several worker processes on this port (memplane_cli/workers.py)


MAX_HEADER_BYTES = 8190  # one header line; a longer Authorization is refused (400) before any handler


class _JsonErrors(RequestHandler):
    """A connection whose own refusals — a request aiohttp cannot parse (a raw non-ASCII path, a
    header line over MAX_HEADER_BYTES, `Transfer-Encoding` with `Content-Length`, a second `Host`,
    a `Content-Encoding` it cannot decode) or a handler's uncaught failure — are JSON errors like
    every other answer: `{"type": "error", "error": {"type", "message", …}}` reads as an error in
    both providers' SDKs and the memory services' clients. aiohttp's own are text/plain and quote
    the bytes sent (a header's value among them)."""

    __slots__ = ()

    def handle_error(self, request: web.BaseRequest, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        super().handle_error(request, status, exc, message)  # logs it; raises when the answer has begun
        return low_level_error(status, exc)

    async def finish_response(self, request: web.BaseRequest, resp: web.StreamResponse,
                              start_time: float | None) -> tuple[web.StreamResponse, bool]:
        """A request whose body did not arrive in time (memplane_core/slow_clients.py) is answered
        (`Connection: close`), then its connection closed at once: aiohttp would otherwise linger,
        reading the body that is not coming, before closing it."""
        expired = request.get(BODY_EXPIRED)
        if expired and not resp.prepared:
            resp.force_close()
        done = await super().finish_response(request, resp, start_time)
        if expired:
            self.force_close()  # what was written is flushed before the socket closes
        return done


def low_level_error(status: int, exc: BaseException | None) -> web.Response:
    """The JSON answer for a request refused before any app saw it (or a failure none caught)."""
    if status >= 500:
        text, kind = "Internal server error.", "api_error"
    else:  # aiohttp's message, without the quoted bytes after its first line
        said = str(getattr(exc, "message", "") or "")
        for quote in (":\n", ": b'", ': b"', ": bytearray("):  # where aiohttp starts quoting the bytes
            said = said.split(quote, 1)[0]
        said = said.strip()
        text, kind = f"The request could not be read as HTTP ({said or 'malformed'}).", "invalid_request_error"
    doc = {"type": "error", "error": {"type": kind, "message": text, "param": None, "code": None}}
    resp = web.json_response(doc, status=status)
    resp.force_close()
    return resp


class _Noted(_JsonErrors):
    """A connection that notes when each request's message was read (memplane_core/arrival.py):
    in order, one time per message its parser gave, handed to that message's request."""

    __slots__ = ("_read_at",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._read_at: deque[float] = deque()
        make = self._request_factory
        assert make is not None

        def noted(message: Any, *rest: Any) -> web.BaseRequest:
            request = make(message, *rest)
            if self._read_at:
                request[ARRIVED] = self._read_at.popleft()
            return request
        self._request_factory = noted

    def data_received(self, data: bytes) -> None:
        before = self._request_count  # counts the messages parsed off this connection
        super().data_received(data)
        if self._request_count > before:
            now = time.monotonic()
            self._read_at.extend(now for _ in range(self._request_count - before))


class _NotingServer(Server):
    def __call__(self) -> RequestHandler:
        return (_Noted if _CAN_NOTE else _JsonErrors)(self, loop=self._loop, **self._kwargs)


# `_Noted` reads two of aiohttp's private slots; an aiohttp without them serves as before, unnoted
# (a recall then counts its deadline from its handler's start), rather than failing every request.
_CAN_NOTE = {"_request_count", "_request_factory"} <= set(getattr(RequestHandler, "__slots__", ()))


class _Runner(web.AppRunner):
    """An `AppRunner` whose connections note when each request was read (`_Noted`) and answer
    their own refusals in JSON (`_JsonErrors`)."""

    async def _make_server(self) -> Server:
        server = await super()._make_server()
        server.__class__ = _NotingServer  # the app's own server, every setting kept
        return server


async def start_site(site: Site, grace_s: float = 30.0) -> tuple[web.AppRunner, int]:
    quiet_header_values()
    # keepalive_timeout: aiohttp drops a connection that has not sent a whole request head this long
    # after it opened or after its last answer — an idle one, or a slowloris (memplane_core/slow_clients.py)
    runner = _Runner(site.app, handle_signals=False, access_log=None, shutdown_timeout=grace_s,
                     max_field_size=MAX_HEADER_BYTES, max_line_size=MAX_HEADER_BYTES,
                     keepalive_timeout=seconds_from_env(HEADER_TIMEOUT_ENV, DEFAULT_HEADER_TIMEOUT_S))
    await runner.setup()
    tcp = web.TCPSite(runner, site.host, site.port, reuse_address=True, reuse_port=site.reuse_port or None)
    await tcp.start()
    port = runner.addresses[0][1] if runner.addresses else site.port
    return runner, port


YOUNG_COLLECTION_EVERY = 10_000  # allocations between young collections in a serving process (CPython: 700)


def freeze_startup_heap() -> None:
    """Move what start-up made (modules, apps, clients: ~78k objects in the proxy) out of the cycle
    collector's sight, as the memory engines do for their indexes (memory_adapters/engine/heap.py).
    Why: a full collection walked all of it — 136-218 ms on this project's busy 2-core host — and
    every turn in flight, a stream's first byte included, waited for it; after the freeze the same
    collection takes microseconds. Per-turn objects are freed by reference counting as before.

    The young generation is then collected every YOUNG_COLLECTION_EVERY allocations, not 700: a turn
    makes a few thousand dicts and lists that live until it ends, and with 32 turns in flight every
    young collection walked (and promoted, to be walked again) the ones still alive: 566 young and
    50 middle collections for 3,000 turns at c=32 took ~90 µs of the proxy's ~1.1 ms a turn, ~20 µs
    at 10,000 (bench/proxy_cpu.py under gc.callbacks). The garbage a cycle holds waits a little longer."""
    gc.collect()  # start-up's garbage first: only what lives is frozen
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, middle, old)


async def serve(sites: list[Site], *, grace_s: float = 30.0,
                on_ready: Callable[[list[int]], Awaitable[None] | None] | None = None) -> None:
    runners = []
    try:
        ports = []
        for site in sites:
            runner, port = await start_site(site, grace_s)
            runners.append(runner)
            ports.append(port)
        freeze_startup_heap()
        if on_ready is not None:
            maybe = on_ready(ports)
            if asyncio.iscoroutine(maybe):
                await maybe
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        for runner in reversed(runners):
            await runner.cleanup()


def run(main: Awaitable[None]) -> None:
    """asyncio.run with uvloop when it is installed (it is faster for a proxy)."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main)
        return
    uvloop.run(main)
