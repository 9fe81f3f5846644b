"""One memory as every store keeps it, and its composite importance. Storage-free: how a store
lays it out (MongoDB's `_id` and BSON dates, SQLite's columns) stays with that store."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from typing import Annotated, Any

from pydantic import Field, TypeAdapter

from memplane_core.contract import ORIGINS, UNTRUSTED_ORIGINS
from memplane_core.instants import MAX_EPOCH, MIN_EPOCH
from memplane_core.provenance import bounded_memory

GLOBAL_AGENT = "*"  # global memories are shared: stored under this agent id
NEVER = 1e18  # live_until of a memory without TTL: one range query serves both kinds
DAY_S = 86_400.0


# A time a store may hold: finite and inside the range every conversion handles (memplane_core.instants).
Epoch = Annotated[float, Field(ge=MIN_EPOCH, le=MAX_EPOCH, allow_inf_nan=False)]


def iso(ts: float | None) -> str | None:
    """RFC 3339 in UTC; None for no time, or for one no date can show (never raises: a listing
    must still show such a row so that it can be deleted)."""
    if ts is None:
        return None
    try:
        return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    except (OverflowError, ValueError, OSError, TypeError):
        return None


def is_pinned(m: "StoredMemory") -> bool:
    """An operator pinned it in the inspector: always eligible in recall (within the budget) and
    never removed by consolidation, caps or the curator. Kept in metadata, so no store changes shape."""
    return isinstance(m.metadata, dict) and m.metadata.get("pinned") is True


def origin_of(m: "StoredMemory") -> str:
    """Where the memory's words came from (one of ORIGINS). A row written before the store kept an
    origin is read by what it is: a turn's words are the user's, the curator's mark is the
    curator's, a `store_memory` write is the model's whatever it claimed, the rest the operator's."""
    meta = m.metadata if isinstance(m.metadata, dict) else {}
    if meta.get("via") == "store_memory":
        return "model"
    origin = meta.get("origin")
    if origin in ORIGINS:
        return origin
    if "curator" in meta:
        return "curator"
    return "user" if m.type == "episode" and m.key.startswith("episode:") else "operator"


def origins_of(m: "StoredMemory") -> frozenset[str]:
    """The origins its words go back to: a curated memory's sources, else its own origin."""
    own = origin_of(m)
    if own == "curator":
        drawn = m.metadata.get("origins") if isinstance(m.metadata, dict) else None
        if isinstance(drawn, list) and drawn and all(o in ORIGINS for o in drawn):
            return frozenset(drawn)
    return frozenset((own,))


def untrusted(m: "StoredMemory") -> bool:
    """Written by a model or a tool (or drawn by the curator from their words only): never pinned,
    never leading a recall, never among the user's standing instructions, and capped in a block."""
    return origins_of(m) <= UNTRUSTED_ORIGINS


def a_reply(m: "StoredMemory") -> bool:
    """An assistant's reply kept as a part of its turn (episodes.episode_parts): the model's words
    beside the person's. It is findable on its own words, but it is no turn of the person's
    conversation: not a neighbour of their turns, not in their sitting (index.py)."""
    return m.type == "episode" and origin_of(m) == "model" and not (isinstance(m.metadata, dict)
                                                                   and m.metadata.get("via") == "store_memory")


def shared(m: "StoredMemory") -> bool:
    return m.scope == "global" or m.agent_id == GLOBAL_AGENT


def tainted(m: "StoredMemory") -> bool:
    """Written in a turn (or MCP call) whose context carried a tool's output, fetched text or another
    agent's words, or drawn from such a memory."""
    return isinstance(m.metadata, dict) and bool(m.metadata.get("tainted"))


def bounded(m: "StoredMemory") -> bool:
    """Held to its share of the budget and never leading (memplane_core/provenance.py): what a tool
    wrote, a model's reply, a shared write, and any model write from a tainted turn. A model's own
    untainted `store_memory` write is recalled like the person's facts (still labelled the model's)."""
    deliberate = (origin_of(m) == "model" and m.type != "episode" and not shared(m))
    return bounded_memory(origins_of(m), tainted=tainted(m), deliberate=deliberate)


def writer_of(m: "StoredMemory") -> str | None:
    """The agent that wrote it: a model's write names its agent (own or shared), a shared memory its
    writer or author; None for what the person or the operator said in an agent's own memory. Every
    view (listing, export, search, recall) reads this one answer."""
    meta = m.metadata if isinstance(m.metadata, dict) else {}
    writer = meta.get("writer")
    if not (isinstance(writer, str) and writer) and shared(m):
        writer = meta.get("author")
    return writer if isinstance(writer, str) and writer else None


def origin_attr(memories: "list[StoredMemory]") -> str:
    """A block's origin: its memories' origins, most trusted first, space-separated."""
    return joined_origins(origin_of(m) for m in memories)


def joined_origins(origins: Iterable[str]) -> str:
    found = set(origins)
    return " ".join(o for o in ORIGINS if o in found)


def writer_attr(memories: "list[StoredMemory]") -> str | None:
    return joined_writers(writer_of(m) for m in memories)


def joined_writers(writers: Iterable[str | None]) -> str | None:
    return " ".join(sorted({w for w in writers if w})) or None


def sources_joined(replaced: "StoredMemory", m: "StoredMemory") -> list[str]:
    """The entries `m`, which replaces `replaced` (same id or key), came from: the replaced one's, then
    its own, so forgetting any of them forgets it (a tool loop's episode, a profile fact said again)."""
    return list(dict.fromkeys([*replaced.source_entry_ids, *m.source_entry_ids]))


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
    last_accessed_at: Epoch | None = None
    created_at: Epoch = field(default_factory=time.time)
    updated_at: Epoch = field(default_factory=time.time)
    expires_at: Epoch | None = None
    said_at: Epoch | None = None  # when it was said (its stamp in the words, else the turn's time)
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

    def field_values(self) -> dict[str, Any]:
        """Every field by name, shallow (asdict() would deep-copy every vector): what a store writes."""
        return {f: getattr(self, f) for f in FIELDS}

    @classmethod
    def checked(cls, data: dict[str, Any]) -> "StoredMemory":
        """A stored row, its types and times checked: a row written by an older version (or by
        hand) that the engine could not index or show raises ValueError here, on load, so the
        store skips that one row instead of failing the agent's index."""
        if isinstance(data, dict) and data.get("embedding") is not None:
            # a vector is checked by the index that takes it (numpy), not float by float here
            vector = data["embedding"]
            m = _CHECK.validate_python({**data, "embedding": None})
            m.embedding = vector if isinstance(vector, list) else None
            return m
        return _CHECK.validate_python(data)

    @classmethod
    def shown(cls, data: Any) -> "StoredMemory":
        """For a listing or a lookup by id: the checked row, else the row as stored (`public()`
        shows a time it cannot convert as null), so that a person can still find and delete it.
        ValueError when not even that can be made of it."""
        try:
            return cls.checked(data)
        except ValueError:
            if not isinstance(data, dict):
                raise
            try:
                return cls(**{k: v for k, v in data.items() if k in _FIELD_SET})
            except TypeError as exc:
                raise ValueError(str(exc)) from None

    def public(self) -> dict[str, Any]:
        """The JSON shape the REST API returns."""
        return {
            "id": self.id, "agent_id": self.agent_id, "scope": self.scope, "session_id": self.session_id,
            "key": self.key, "value": self.value, "type": self.type, "importance": self.importance,
            "access_count": self.access_count, "last_accessed_at": iso(self.last_accessed_at),
            "created_at": iso(self.created_at), "updated_at": iso(self.updated_at),
            "expires_at": iso(self.expires_at), "said_at": iso(self.said_at), "metadata": self.metadata,
            "source_entry_ids": self.source_entry_ids, "origin": origin_of(self),
            "origins": sorted(origins_of(self), key=ORIGINS.index) if origin_of(self) == "curator" else None,
            "writer": writer_of(self), "tainted": tainted(self),
        }


FIELDS = tuple(f.name for f in fields(StoredMemory))
_FIELD_SET = frozenset(FIELDS)
_CHECK = TypeAdapter(StoredMemory)
