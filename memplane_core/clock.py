"""Time stamps as the ledger and the services write them."""

from __future__ import annotations

import time

_second: tuple[int, str] = (-1, "")  # the last whole second formatted, and its text (one tuple: threads read it whole)


def now_rfc3339() -> str:
    """Now, UTC, to the millisecond: `2026-11-27T08:31:35.123Z`. The seconds are formatted once per
    second (a turn stamps itself three or four times, and `datetime.now().isoformat()` each time
    cost nearly twice this)."""
    global _second
    sec, ns = divmod(time.time_ns(), 1_000_000_000)
    cached = _second
    if cached[0] != sec:
        cached = _second = (sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec)))
    return f"{cached[1]}.{ns // 1_000_000:03d}Z"
