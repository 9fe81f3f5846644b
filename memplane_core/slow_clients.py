"""How long a caller may take to send its request, for every server memplane runs.

Why: aiohttp waits for a body as long as the connection stays open, so a client that announces a
`Content-Length` and sends nothing held its connection, and the handler's task, for ever (an
attacker's review, docs/operating.md). A body is read within MEMPLANE_BODY_TIMEOUT_S; past it the
caller is answered 408 in its own format (the proxy's, the services') and the connection closed
(memplane_cli/runner.py closes a connection whose request is marked `BODY_EXPIRED` once the answer
is out). A request head that never ends (slowloris) is aiohttp's to bound: its keep-alive timer runs
from the moment the connection opens until a whole head is read, and it drops the connection then;
MEMPLANE_HEADER_TIMEOUT_S sets it (runner.py). The variables are read when used, so one setting
serves the proxy and the memory services alike.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

BODY_TIMEOUT_ENV, DEFAULT_BODY_TIMEOUT_S = "MEMPLANE_BODY_TIMEOUT_S", 30.0
HEADER_TIMEOUT_ENV, DEFAULT_HEADER_TIMEOUT_S = "MEMPLANE_HEADER_TIMEOUT_S", 75.0  # nginx's keepalive_timeout
BODY_EXPIRED = "memplane.body_expired"  # request key: its body did not arrive in time (close after answering)

T = TypeVar("T")


class BodyTimedOut(Exception):
    """The caller's body did not arrive within `seconds`."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"The request body did not arrive within {seconds:g} s.")


def seconds_from_env(name: str, default: float) -> float:
    """A positive number of seconds from `name`, else `default` (unset, unreadable or not above 0)."""
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default


async def read_in_time(request: Any, read: Callable[[], Awaitable[T]] | None = None) -> T:
    """`request.read()` (or `read`, e.g. `request.post`) within the body deadline; past it the request
    is marked `BODY_EXPIRED` and BodyTimedOut raised for the caller's own 408."""
    seconds = seconds_from_env(BODY_TIMEOUT_ENV, DEFAULT_BODY_TIMEOUT_S)
    try:
        async with asyncio.timeout(seconds):
            return await (read or request.read)()
    except TimeoutError:
        request[BODY_EXPIRED] = True
        raise BodyTimedOut(seconds) from None
