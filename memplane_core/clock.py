"""Time stamps as the ledger and the services write them."""

from __future__ import annotations

from datetime import datetime, timezone


def now_rfc3339() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
