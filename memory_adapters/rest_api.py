"""The REST API for people and tools: /api/memories (store, list, get, search, delete).

One API over any store that offers `MemoryRest` (embedded and tiered do). Who may do what:
the service token (`MEMPLANE_ADAPTER_TOKEN`) is the admin and may do everything; a per-agent
token reads and writes only its own agent's memories, reads global ones, and writes or deletes
global ones only with a grant in the tokens file. The author of a memory is the identity of the
token that wrote it, never a body field.
"""

from __future__ import annotations

import base64
import time
from datetime import datetime, timezone
from typing import Any, Literal, Protocol

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memplane_core.ids import AGENT_ID_PATTERN
from memplane_core.instants import Instant, OutOfRange, parse_instant

from .engine.record import GLOBAL_AGENT, StoredMemory
from .server import CALLER_AGENT, CALLER_GRANTS, json_error, parse


class MemoryRest(Protocol):
    """What a store offers for the REST API (embedded and tiered implement it)."""

    async def store_memory(self, m: StoredMemory) -> tuple[StoredMemory, bool]: ...
    async def get_memory(self, memory_id: str) -> StoredMemory | None: ...
    async def page(self, *, agent_id: str, scope: str | None, type_: str | None, session_id: str | None,
                   limit: int, after: tuple[float, str] | None) -> list[StoredMemory]: ...
    async def search(self, agent_id: str, query: str, *, top_k: int, session_id: str | None = None,
                     type_filter: set[str] | None = None, min_importance: float | None = None
                     ) -> list[tuple[StoredMemory, float]]: ...
    async def delete_memory(self, memory_id: str) -> bool: ...


MAX_TTL_S = 100 * 365 * 86_400


class StoreBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent_id: str = Field(pattern=AGENT_ID_PATTERN)
    scope: Literal["session", "agent", "global"] = "agent"
    session_id: str | None = None
    key: str = Field(min_length=1, max_length=256)
    value: str = Field(min_length=1, max_length=65536)
    type: Literal["fact", "preference", "episode", "strategy_outcome", "constraint", "directive", "summary"] = "fact"
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    ttl: int | str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
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

    @field_validator("ttl")
    @classmethod
    def _ttl(cls, v: int | str | None) -> int | str | None:
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

    def expires_at(self) -> float | None:
        if self.ttl is None:
            return None
        if isinstance(self.ttl, int):
            return time.time() + self.ttl
        return parse_instant(self.ttl).timestamp()


class SearchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent_id: str = Field(pattern=AGENT_ID_PATTERN)
    query: str = Field(min_length=1)
    top_k: int = Field(default=10, ge=1, le=100)
    type_filter: list[str] | str | None = None
    min_importance: float | None = Field(default=None, ge=0.0, le=1.0)
    session_id: str | None = None


def _epoch(when: datetime | None) -> float | None:
    if when is None:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


def _json(doc: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(doc), content_type="application/json")


def _cursor_out(m: StoredMemory) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([m.updated_at, m.id])).decode()


def _cursor_in(text: str) -> tuple[float, str]:
    updated, mid = orjson.loads(base64.urlsafe_b64decode(text.encode()))
    return float(updated), str(mid)


def _forbidden(request: web.Request, agent_id: str) -> web.Response | None:
    """With per-agent tokens, a caller may only name itself."""
    caller = request.get(CALLER_AGENT)
    if caller is not None and agent_id != caller:
        return json_error(403, "agent_id does not match the token", "agent_id")
    return None


def _author(request: web.Request) -> str:
    caller = request.get(CALLER_AGENT)
    return caller if caller is not None else "admin"


def _may_write(request: web.Request, m: StoredMemory) -> bool:
    """The admin writes anything; an agent its own memories, and global ones only with a grant."""
    caller = request.get(CALLER_AGENT)
    if caller is None:
        return True
    if m.scope == "global" or m.agent_id == GLOBAL_AGENT:
        return "global" in request.get(CALLER_GRANTS, ())
    return m.agent_id == caller


def _may_read(request: web.Request, m: StoredMemory | None) -> bool:
    caller = request.get(CALLER_AGENT)
    return m is not None and (caller is None or m.agent_id == caller or m.scope == "global")


def add_api_routes(app: web.Application, service: MemoryRest) -> None:
    async def store(request: web.Request) -> web.Response:
        body = await parse(request, StoreBody)  # 400 naming the field; 403 for another agent's id
        agent = GLOBAL_AGENT if body.scope == "global" else body.agent_id
        meta = {k: v for k, v in body.metadata.items() if k != "author"}
        meta["author"] = _author(request)
        m = StoredMemory(agent_id=agent, scope=body.scope, key=body.key, value=body.value, type=body.type,
                   importance=body.importance, session_id=body.session_id if body.scope == "session" else None,
                   expires_at=body.expires_at(), metadata=meta, source_entry_ids=list(body.source_entry_ids),
                   said_at=_epoch(body.said_at))
        if body.created_at is not None:
            m.created_at = m.updated_at = _epoch(body.created_at)
        if not _may_write(request, m):
            return json_error(403, "writing global memories needs the admin token or a global grant", "scope")
        stored, created = await service.store_memory(m)
        return _json(stored.public(), 201 if created else 200)

    async def list_memories(request: web.Request) -> web.Response:
        q = request.query
        agent_id = q.get("agent_id")
        if not agent_id:
            return json_error(400, "agent_id: field required", "agent_id")
        if (denied := _forbidden(request, agent_id)) is not None:
            return denied
        try:
            limit = int(q.get("limit", "50"))
            if not 1 <= limit <= 500:
                raise ValueError
        except ValueError:
            return json_error(400, "limit: must be an integer from 1 to 500", "limit")
        scope = q.get("scope") or None
        if scope is not None and scope not in ("session", "agent", "global"):
            return json_error(400, "scope: must be session, agent or global", "scope")
        try:
            after = _cursor_in(q["cursor"]) if q.get("cursor") else None
        except (ValueError, TypeError, orjson.JSONDecodeError):
            return json_error(400, "cursor: not a cursor this API issued", "cursor")
        page = await service.page(agent_id=GLOBAL_AGENT if scope == "global" else agent_id, scope=scope,
                                  type_=q.get("type") or None, session_id=q.get("session_id") or None,
                                  limit=limit + 1, after=after)
        more = len(page) > limit
        page = page[:limit]
        return _json({"memories": [m.public() for m in page], "next_cursor": _cursor_out(page[-1]) if more else None})

    async def get_one(request: web.Request) -> web.Response:
        m = await service.get_memory(request.match_info["id"])
        if m is None or m.expired() or not _may_read(request, m):
            return json_error(404, "memory not found")
        return _json(m.public())

    async def search(request: web.Request) -> web.Response:
        body = await parse(request, SearchBody)
        types = {body.type_filter} if isinstance(body.type_filter, str) else set(body.type_filter or ())
        ranked = await service.search(body.agent_id, body.query, session_id=body.session_id, top_k=body.top_k,
                                      type_filter=types or None, min_importance=body.min_importance)
        return _json({"results": [{**m.public(), "score": round(s, 4)} for m, s in ranked]})

    async def delete(request: web.Request) -> web.Response:
        m = await service.get_memory(request.match_info["id"])
        if m is None or not _may_read(request, m):
            return json_error(404, "memory not found")
        if not _may_write(request, m):
            return json_error(403, "deleting global memories needs the admin token or a global grant")
        if not await service.delete_memory(m.id):
            return json_error(404, "memory not found")
        return web.Response(status=204)

    app.router.add_post("/api/memories", store)
    app.router.add_get("/api/memories", list_memories)
    app.router.add_post("/api/memories/search", search)
    app.router.add_get("/api/memories/{id}", get_one)
    app.router.add_delete("/api/memories/{id}", delete)
