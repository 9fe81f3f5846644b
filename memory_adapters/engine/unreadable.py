"""An entry the engine cannot turn into memories: that entry's own answer, never the whole call's.

A retain the service fails with 5xx is retried by the proxy (CONTRACT §6: a 5xx is the service's
trouble, and retain is idempotent), so an entry whose shape trips the extraction would fail every
retry and hold up every later turn of its agent for good. Extraction is pure — the same entry fails
the same way every time — so its failure is the entry's fault: it is answered `unreadable` (422 per
item, docs/memory-services.md) and logged without its words; writes to the store still fail the call.
"""

from __future__ import annotations

import traceback
from pathlib import Path
from typing import Any, Callable

from memplane_core.contract import UNREADABLE
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry

from .record import StoredMemory

__all__ = ["UNREADABLE", "memories_of"]


async def memories_of(redactor: Redactor, telemetry: Telemetry, extract: Callable[..., list[StoredMemory]],
                      agent_id: str, entry: dict[str, Any], metadata: dict[str, Any]) -> list[StoredMemory] | None:
    """`extract`'s memories of `entry` (run off the loop), or None when it cannot read the entry."""
    try:
        return await redactor.off_loop(entry, extract, agent_id, entry, metadata, redactor)
    except Exception as exc:  # noqa: BLE001 - any failure of a pure function over one entry is that entry's
        where = traceback.extract_tb(exc.__traceback__)[-1]  # the type and the place: the message may quote the words
        telemetry.error("retain_entry_unreadable", agent_id=agent_id, entry_id=entry.get("id"),
                        error=type(exc).__name__, where=f"{Path(where.filename).name}:{where.lineno}")
        return None
