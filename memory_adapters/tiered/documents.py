"""A memory as the tiered store writes it to MongoDB and Redis: the id as `_id`, a BSON date for
MongoDB's TTL index, and `live_until` so one range query serves memories with and without TTL."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from ..engine.record import FIELDS, NEVER, StoredMemory

_NAMES = frozenset(FIELDS)


def to_doc(m: StoredMemory) -> dict[str, Any]:
    doc = m.field_values()
    doc["_id"] = doc.pop("id")
    # A real BSON date for MongoDB's TTL index; the float stays the source of truth.
    doc["expires_on"] = datetime.fromtimestamp(m.expires_at, timezone.utc) if m.expires_at else None
    doc["live_until"] = m.expires_at if m.expires_at is not None else NEVER
    return doc


def from_doc(doc: dict[str, Any], *, lenient: bool = False) -> StoredMemory:
    """A MongoDB or Redis document; ValueError when the row cannot be indexed (`lenient`: only
    when it cannot even be shown, see `StoredMemory.shown`)."""
    data = {k: v for k, v in doc.items() if k in _NAMES}
    data["id"] = doc.get("_id")
    return StoredMemory.shown(data) if lenient else StoredMemory.checked(data)
