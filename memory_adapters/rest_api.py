"""The REST API for people and tools: /api/memories (store, list, get, search, edit, delete) and
each memory's audit trail.

One API over any store that offers `MemoryRest` (embedded and tiered do). Who may do what:
the service token (`MEMPLANE_ADAPTER_TOKEN`) is the admin and may do everything; a per-agent
token reads and writes only its own agent's memories, reads global ones, and writes or deletes
global ones only with a grant in the tokens file. The author of a memory is the identity of the
token that wrote it, never a body field.

Edits (`PATCH`: text, importance, TTL, pin) and deletes are recorded in the store's audit trail:
who (the token's identity; the admin token may name the person, e.g. the inspector's operator),
when, the reason, and the memory before and after.
"""

from __future__ import annotations

import base64
import copy
import time
from datetime import datetime, timezone
from typing import Any, Literal, Protocol

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memplane_core.ids import AGENT_ID_PATTERN
from memplane_core.instants import Instant, OutOfRange, parse_instant

from .engine.record import GLOBAL_AGENT, StoredMemory, is_pinned
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
    async def record_audit(self, entry: dict[str, Any]) -> None: ...
    async def audit_trail(self, *, agent_id: str, memory_id: str | None, limit: int) -> list[dict[str, Any]]: ...


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


def _ttl_check(v: int | str | None) -> int | str | None:
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


def _expiry(ttl: int | str) -> float:
    return time.time() + ttl if isinstance(ttl, int) else parse_instant(ttl).timestamp()


class PatchBody(BaseModel):
    """An edit: only the fields sent change; `"ttl": null` makes the memory permanent again."""
    model_config = ConfigDict(extra="forbid")
    value: str | None = Field(default=None, min_length=1, max_length=65536)
    importance: float | None = Field(default=None, ge=0.0, le=1.0)
    ttl: int | str | None = None
    pinned: bool | None = None
    reason: str | None = Field(default=None, max_length=1000)
    actor: str | None = Field(default=None, min_length=1, max_length=200)  # honoured for the admin token only

    @field_validator("ttl")
    @classmethod
    def _ttl(cls, v: int | str | None) -> int | str | None:
        return _ttl_check(v)

    @model_validator(mode="after")
    def _changes_something(self) -> "PatchBody":
        if not self.model_fields_set & {"value", "importance", "ttl", "pinned"}:
            raise ValueError("nothing to change: send value, importance, ttl or pinned")
        return self


AUDIT_FIELDS = ("value", "importance", "expires_at", "pinned")


def _audit_view(m: StoredMemory | None) -> dict[str, Any] | None:
    """What the audit trail keeps of a memory: the fields a person edits."""
    if m is None:
        return None
    doc = m.public()
    return {"key": m.key, "type": m.type, "scope": m.scope, "value": m.value, "importance": m.importance,
            "expires_at": doc["expires_at"], "pinned": is_pinned(m)}


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


def _who(request: web.Request, actor: str | None) -> str:
    """The audit trail's "who": the token's identity; the admin token may add the person's name."""
    who = _author(request)
    if who == "admin" and actor:
        return f"admin ({actor.strip()[:200]})"
    return who


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

    async def audit(request: web.Request, action: str, before: StoredMemory | None, after: StoredMemory | None,
                    reason: str | None, actor: str | None) -> None:
        m = after or before
        assert m is not None
        await service.record_audit({
            "ts": time.time(), "at": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "agent_id": m.agent_id, "memory_id": m.id, "action": action, "who": _who(request, actor),
            "reason": reason, "before": _audit_view(before), "after": _audit_view(after)})

    async def edit(request: web.Request) -> web.Response:
        body = await parse(request, PatchBody)
        old = await service.get_memory(request.match_info["id"])
        if old is None or old.expired() or not _may_read(request, old):
            return json_error(404, "memory not found")
        if not _may_write(request, old):
            return json_error(403, "editing global memories needs the admin token or a global grant")
        new = copy.deepcopy(old)
        sent = body.model_fields_set
        if body.value is not None:
            new.value = body.value
        if body.importance is not None:
            new.importance = body.importance
        if "ttl" in sent:
            new.expires_at = None if body.ttl is None else _expiry(body.ttl)
        if body.pinned is not None:
            new.metadata = {k: v for k, v in new.metadata.items() if k != "pinned"}
            if body.pinned:
                new.metadata["pinned"] = True
        new.updated_at = time.time()
        stored, _ = await service.store_memory(new)
        only_pin = sent - {"reason", "actor"} == {"pinned"}
        action = ("pin" if body.pinned else "unpin") if only_pin else "edit"
        await audit(request, action, old, stored, body.reason, body.actor)
        return _json(stored.public())

    async def audit_of_one(request: web.Request) -> web.Response:
        m = await service.get_memory(request.match_info["id"])
        if m is None or not _may_read(request, m):
            return json_error(404, "memory not found")
        trail = await service.audit_trail(agent_id=m.agent_id, memory_id=m.id, limit=200)
        return _json({"audit": trail})

    async def audit_of_agent(request: web.Request) -> web.Response:
        agent_id = request.query.get("agent_id")
        if not agent_id:
            return json_error(400, "agent_id: field required", "agent_id")
        if (denied := _forbidden(request, agent_id)) is not None:
            return denied
        try:
            limit = int(request.query.get("limit", "100"))
            if not 1 <= limit <= 1000:
                raise ValueError
        except ValueError:
            return json_error(400, "limit: must be an integer from 1 to 1000", "limit")
        return _json({"audit": await service.audit_trail(agent_id=agent_id, memory_id=None, limit=limit)})

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
        bounds: dict[str, float | None] = {}
        for name in ("since", "until"):  # changed at or after `since`, before `until` (RFC 3339 or a date)
            text = q.get(name) or None
            try:
                bounds[name] = parse_instant(text).timestamp() if text else None
            except (OutOfRange, ValueError):
                return json_error(400, f"{name}: must be an RFC 3339 time or a date (YYYY-MM-DD)", name)
        page = await service.page(agent_id=GLOBAL_AGENT if scope == "global" else agent_id, scope=scope,
                                  type_=q.get("type") or None, session_id=q.get("session_id") or None,
                                  limit=limit + 1, after=after, **bounds)
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
        said: dict[str, Any] = {}
        if request.can_read_body:  # {"reason": …, "actor": …}: the inspector's way; `?reason=` for curl
            try:
                doc = orjson.loads(await request.read())
            except orjson.JSONDecodeError:
                return json_error(400, "body is not valid JSON")
            said = doc if isinstance(doc, dict) else {}
        reason = str(said.get("reason") or request.query.get("reason", ""))[:1000] or None
        actor = str(said.get("actor") or request.query.get("actor", ""))[:200] or None
        m = await service.get_memory(request.match_info["id"])
        if m is None or not _may_read(request, m):
            return json_error(404, "memory not found")
        if not _may_write(request, m):
            return json_error(403, "deleting global memories needs the admin token or a global grant")
        if not await service.delete_memory(m.id):
            return json_error(404, "memory not found")
        await audit(request, "forget", m, None, reason, actor)
        return web.Response(status=204)

    app.router.add_post("/api/memories", store)
    app.router.add_get("/api/memories", list_memories)
    app.router.add_post("/api/memories/search", search)
    app.router.add_get("/api/memories/{id}", get_one)
    app.router.add_delete("/api/memories/{id}", delete)
    app.router.add_patch("/api/memories/{id}", edit)
    app.router.add_get("/api/memories/{id}/audit", audit_of_one)
    app.router.add_get("/api/audit", audit_of_agent)
