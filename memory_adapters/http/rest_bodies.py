"""The REST API's request bodies, typed: what a person or tool may send to /api/memories.
`memplane memory import` validates exported rows with `StoreBody` before it sends them."""

from __future__ import annotations

import time
from typing import Annotated, Any, Literal

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, field_validator,
                      model_validator)
from pydantic_core import PydanticUseDefault

from memplane_core.contract import ONE_LINE, Share, TopK, single_line
from memplane_core.ids import AGENT_ID_PATTERN
from memplane_core.instants import Instant, OutOfRange, parse_instant

Scope = Literal["session", "agent", "global"]

MAX_TTL_S = 100 * 365 * 86_400


def not_bool(v: Any) -> Any:
    """`true` is not a number of seconds (pydantic's lax int would read it as 1 s)."""
    if isinstance(v, bool):
        raise ValueError("ttl must be seconds or an RFC 3339 time, not true or false")
    return v


def ttl_check(v: int | str | None) -> int | str | None:
    """A TTL is seconds (1 s to 100 years) or an RFC 3339 time a date can show."""
    if isinstance(v, int) and not 0 < v <= MAX_TTL_S:
        raise ValueError(f"ttl seconds must be from 1 to {MAX_TTL_S}")
    if isinstance(v, str):
        try:
            parse_instant(v)
        except OutOfRange as exc:
            raise ValueError(f"ttl: {exc}") from None
        except ValueError:
            raise ValueError("ttl must be seconds or an RFC 3339 time") from None
    return v


# seconds or an RFC 3339 time, checked the same way wherever a TTL is written
Ttl = Annotated[int | str | None, BeforeValidator(not_bool), AfterValidator(ttl_check),
                WithJsonSchema({"anyOf": [{"type": "integer", "minimum": 1, "maximum": MAX_TTL_S},
                                          {"type": "string", "format": "date-time"}, {"type": "null"}]})]

MAX_METADATA_DEPTH = 32  # MongoDB refuses documents nested over 100 levels; a memory's metadata sits inside one


def storable_metadata(v: dict[str, Any]) -> dict[str, Any]:
    """Metadata every store can keep: no NUL in a key (BSON field names cannot hold one: the
    tiered store's write failed with a 500) and at most MAX_METADATA_DEPTH levels deep."""
    level = [v]
    for _ in range(MAX_METADATA_DEPTH):
        nested = []
        for node in level:
            if isinstance(node, dict):
                if any("\x00" in k for k in node):
                    raise ValueError("metadata keys cannot contain a NUL character")
                nested.extend(node.values())
            elif isinstance(node, list):
                nested.extend(node)
        if not nested:
            return v
        level = nested
    raise ValueError(f"metadata is nested deeper than {MAX_METADATA_DEPTH} levels")


# the schema's readers see the NUL rule for the keys they write; nested keys and the depth rule it leaves unsaid
Metadata = Annotated[dict[str, Any], AfterValidator(storable_metadata),
                     WithJsonSchema({"type": "object", "propertyNames": {"pattern": "^[^\\u0000]*$"}})]


class StoreBody(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra={  # `_session_needs_id`, for readers of the schema
        "if": {"properties": {"scope": {"const": "session"}}, "required": ["scope"]},
        "then": {"required": ["session_id"], "properties": {"session_id": {"type": "string", "minLength": 1}}}})
    agent_id: str = Field(pattern=AGENT_ID_PATTERN)
    scope: Literal["session", "agent", "global"] = "agent"
    session_id: str | None = None
    key: Annotated[str, Field(min_length=1, max_length=256, pattern=ONE_LINE), AfterValidator(single_line)]
    value: str = Field(min_length=1, max_length=65536)
    type: Literal["fact", "preference", "episode", "strategy_outcome", "constraint", "directive", "summary"] = "fact"
    importance: Share = 0.5
    ttl: Ttl = None
    metadata: Metadata = Field(default_factory=dict)
    # restoring an export (`memplane memory import`): when it was said and made, and from which turns
    # times out of range (say 0001-01-01T00:00:00+14:00) are refused here, naming the field
    said_at: Instant | None = None
    created_at: Instant | None = None
    source_entry_ids: list[str] = Field(default_factory=list, max_length=1000)

    @model_validator(mode="after")
    def _session_needs_id(self) -> "StoreBody":
        if self.scope == "session" and not self.session_id:
            raise ValueError("session_id is required when scope is 'session'")
        return self

    def expires_at(self) -> float | None:
        return None if self.ttl is None else expiry(self.ttl)


def expiry(ttl: int | str) -> float:
    """The epoch a TTL ends at."""
    return time.time() + ttl if isinstance(ttl, int) else parse_instant(ttl).timestamp()


class PatchBody(BaseModel):
    """An edit: only the fields sent change; `"ttl": null` makes the memory permanent again."""
    model_config = ConfigDict(extra="forbid", json_schema_extra={  # at least one change (`_changes_something`)
        "anyOf": [{"required": [name]} for name in ("value", "importance", "ttl", "pinned")]})
    value: str | None = Field(default=None, min_length=1, max_length=65536)
    importance: Share | None = None
    ttl: Ttl = None
    pinned: bool | None = Field(default=None, strict=True)  # not "yes" or 1
    reason: str | None = Field(default=None, max_length=1000)
    actor: str | None = Field(default=None, min_length=1, max_length=200)  # honoured for the admin token only

    @model_validator(mode="after")
    def _changes_something(self) -> "PatchBody":
        if not self.model_fields_set & {"value", "importance", "ttl", "pinned"}:
            raise ValueError("nothing to change: send value, importance, ttl or pinned")
        return self


class SearchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent_id: str = Field(pattern=AGENT_ID_PATTERN)
    query: str = Field(min_length=1)
    top_k: TopK = 10
    type_filter: list[str] | str | None = None
    min_importance: Share | None = None
    session_id: str | None = None


class _Query(BaseModel):
    """Query parameters: an empty one counts as absent; unknown ones are ignored."""
    agent_id: str = Field(min_length=1)

    @field_validator("*", mode="before")
    @classmethod
    def _blank_is_absent(cls, v: Any) -> Any:
        if v == "":  # `?limit=` is no limit given: the default, as for `?since=` (not a 400)
            raise PydanticUseDefault()
        return v


class ListQuery(_Query):
    """`GET /api/memories`: one agent's memories, newest change first, a page at a time."""
    limit: int = Field(default=50, ge=1, le=500)
    scope: Scope | None = None
    type: str | None = None
    session_id: str | None = None
    cursor: str | None = None
    since: Instant | None = None  # changed at or after
    until: Instant | None = None  # changed before


class AuditQuery(_Query):
    """`GET /api/audit`: one agent's audit trail, newest first."""
    limit: int = Field(default=100, ge=1, le=1000)
