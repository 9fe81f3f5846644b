"""When a request was read off its connection, for a handler that runs later.

Why: on a busy event loop a request's handler starts only after every handler queued before it
has run. At 32 recalls in flight the memory service's 32nd recall started ~250 ms after its
bytes were read, yet counted the proxy's `deadline_ms` (CONTRACT §5: how long the proxy will
still wait when it sends) from its own start — so it ranked in full and answered after the
proxy had given up (bench/results/HISTORY.md, "Many agents at once"). The servers memplane runs
(memplane_cli/runner.py) note the moment each request's message was parsed under `ARRIVED`
in the request (the event loop's `time.monotonic()`); a handler can then count from there.
"""

from __future__ import annotations

import time
from typing import Any

ARRIVED = "memplane.arrived"  # request key: time.monotonic() when the request was read


def waited_s(request: Any) -> float:
    """Seconds since the request was read (0 when the server did not note it: a test server)."""
    at = request.get(ARRIVED)
    return 0.0 if at is None else max(0.0, time.monotonic() - at)
