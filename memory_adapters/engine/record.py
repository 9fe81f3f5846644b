"""The tiered adapter's memory record and its composite importance."""

from __future__ import annotations

import math
import time
import uuid
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import Any

GLOBAL_AGENT = "*"  # global memories are shared: stored under this agent id
NEVER = 1e18  # live_until of a memory without TTL: one range query serves both kinds
DAY_S = 86_400.0


def iso(ts: float | None) -> str | None:
    if ts is None:
        return None
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def new_id() -> str:
    return "mem_" + uuid.uuid4().hex


@dataclass
class StoredMemory:
    """One memory as a store keeps it (what the engine indexes and the REST API shows)."""

    agent_id: str
    scope: str
    key: str
    value: str
    type: str = "fact"
    importance: float = 0.5
    session_id: str | None = None
    id: str = field(default_factory=new_id)
    access_count: int = 0
    last_accessed_at: float | None = None
    created_at: float = field(default_factory=time.time)
    updated_at: float = field(default_factory=time.time)
    expires_at: float | None = None
    said_at: float | None = None  # when it was said (session date), for temporal questions
    metadata: dict[str, Any] = field(default_factory=dict)
    source_entry_ids: list[str] = field(default_factory=list)
    embedding: list[float] | None = None

    def composite_importance(self, now: float | None = None) -> float:
        """0.3·recency (30-day decay) + 0.3·access (saturates at 10) + 0.4·author importance."""
        now = now or time.time()
        age_days = max(0.0, (now - self.created_at) / DAY_S)
        return (0.3 * math.exp(-age_days / 30) + 0.3 * min(self.access_count / 10, 1.0)
                + 0.4 * self.importance)

    def expired(self, now: float | None = None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or time.time())

    def to_doc(self) -> dict[str, Any]:
        doc = {f: getattr(self, f) for f in _FIELDS}  # shallow: asdict() would deep-copy every vector
        doc["_id"] = doc.pop("id")
        # A real BSON date for MongoDB's TTL index; the float stays the source of truth.
        doc["expires_on"] = datetime.fromtimestamp(self.expires_at, timezone.utc) if self.expires_at else None
        doc["live_until"] = self.expires_at if self.expires_at is not None else NEVER
        return doc

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> "StoredMemory":
        known = {f for f in cls.__dataclass_fields__}
        data = {k: v for k, v in doc.items() if k in known}
        data["id"] = doc["_id"]
        return cls(**data)

    def public(self) -> dict[str, Any]:
        """The JSON shape the REST API returns."""
        return {
            "id": self.id, "agent_id": self.agent_id, "scope": self.scope, "session_id": self.session_id,
            "key": self.key, "value": self.value, "type": self.type, "importance": self.importance,
            "access_count": self.access_count, "last_accessed_at": iso(self.last_accessed_at),
            "created_at": iso(self.created_at), "updated_at": iso(self.updated_at),
            "expires_at": iso(self.expires_at), "said_at": iso(self.said_at), "metadata": self.metadata,
            "source_entry_ids": self.source_entry_ids,
        }


_FIELDS = tuple(f.name for f in fields(StoredMemory))
