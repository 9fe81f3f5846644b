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
from typing import Any, Protocol

import orjson
from aiohttp import web

from memplane_core.contract import ORIGINS, RESERVED_METADATA, RESTORABLE_METADATA, UNTRUSTED_ORIGINS

from ..engine.record import GLOBAL_AGENT, StoredMemory, is_pinned, untrusted
from .auth import CALLER_AGENT, CALLER_GRANTS
from .bodies import parse, parse_query, read_body
from .errors import json_error, json_response
from .rest_bodies import AuditQuery, ListQuery, PatchBody, SearchBody, StoreBody, expiry


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


MEMORY_REST = web.AppKey("memory_rest", MemoryRest)


def _audit_view(m: StoredMemory | None) -> dict[str, Any] | None:
    """What the audit trail keeps of a memory: the fields a person edits."""
    if m is None:
        return None
    doc = m.public()
    return {"key": m.key, "type": m.type, "scope": m.scope, "value": m.value, "importance": m.importance,
            "expires_at": doc["expires_at"], "pinned": is_pinned(m)}


def _epoch(when: datetime | None) -> float | None:
    if when is None:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=timezone.utc)).timestamp()


def _cursor_out(m: StoredMemory) -> str:
    return base64.urlsafe_b64encode(orjson.dumps([m.updated_at, m.id])).decode()


def _cursor_in(text: str) -> tuple[float, str]:
    updated, mid = orjson.loads(base64.urlsafe_b64decode(text.encode()))
    return float(updated), str(mid)


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


async def store(request: web.Request) -> web.Response:
    service = request.app[MEMORY_REST]
    body = await parse(request, StoreBody)  # 400 naming the field; 403 for another agent's id
    agent = GLOBAL_AGENT if body.scope == "global" else body.agent_id
    # no pin without the audited PATCH; an agent token cannot forge the curator's marks either
    admin = request.get(CALLER_AGENT) is None
    keep = RESTORABLE_METADATA if admin else frozenset()
    meta = {k: v for k, v in body.metadata.items() if k not in RESERVED_METADATA or k in keep}
    meta["author"] = _author(request)
    meta.update(provenance(body.metadata, admin=admin, author=meta["author"], shared=body.scope == "global"))
    m = StoredMemory(agent_id=agent, scope=body.scope, key=body.key, value=body.value, type=body.type,
                     importance=body.importance, session_id=body.session_id if body.scope != "global" else None,
                     expires_at=body.expires_at(), metadata=meta, source_entry_ids=list(body.source_entry_ids),
                     said_at=_epoch(body.said_at))
    if body.created_at is not None:
        m.created_at = m.updated_at = _epoch(body.created_at)
    if not _may_write(request, m):
        return json_error(403, "writing global memories needs the admin token or a global grant", "scope")
    stored, created = await service.store_memory(m)
    return json_response(stored.public(), 201 if created else 200)


def provenance(said: dict[str, Any], *, admin: bool, author: str, shared: bool) -> dict[str, Any]:
    """The provenance the store gives a REST write: `operator` unless the caller declares a less
    trusted origin (the proxy writes the model's `store_memory` as `model`); only the admin token
    may restore another (an export's origin, the curator's). A shared memory, and a model's or a
    tool's, names its writer: an agent token's own identity, or the agent the admin token writes for
    (so the listing's `writer` is the same whichever token the proxy's manifest holds)."""
    declared = said.get("origin")
    if declared not in ORIGINS or not (admin or declared in UNTRUSTED_ORIGINS):
        declared = "operator"
    out: dict[str, Any] = {"origin": declared}
    drawn = said.get("origins")
    if admin and declared == "curator" and isinstance(drawn, list) and drawn and all(o in ORIGINS for o in drawn):
        out["origins"] = list(dict.fromkeys(drawn))
    if said.get("tainted") is True:
        out["tainted"] = True  # a caller may only ever add the mark
    writer = said.get("writer") if admin else author
    if (shared or declared in UNTRUSTED_ORIGINS) and isinstance(writer, str) and writer:
        out["writer"] = writer[:200]
    return out


async def _record_audit(request: web.Request, action: str, before: StoredMemory | None,
                        after: StoredMemory | None, reason: str | None, actor: str | None) -> None:
    service = request.app[MEMORY_REST]
    m = after or before
    assert m is not None
    await service.record_audit({
        "ts": time.time(), "at": datetime.now(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "agent_id": m.agent_id, "memory_id": m.id, "action": action, "who": _who(request, actor),
        "reason": reason, "before": _audit_view(before), "after": _audit_view(after)})


async def edit(request: web.Request) -> web.Response:
    service = request.app[MEMORY_REST]
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
        new.expires_at = None if body.ttl is None else expiry(body.ttl)
    if body.pinned and untrusted(old):
        return json_error(409, "a memory a model or a tool wrote cannot be pinned: pinned memories lead every "
                               "recall (store it again as the operator to pin it)", "pinned")
    if body.pinned is not None:
        new.metadata = {k: v for k, v in new.metadata.items() if k != "pinned"}
        if body.pinned:
            new.metadata["pinned"] = True
    new.updated_at = time.time()
    stored, _ = await service.store_memory(new)
    only_pin = sent - {"reason", "actor"} == {"pinned"}
    action = ("pin" if body.pinned else "unpin") if only_pin else "edit"
    await _record_audit(request, action, old, stored, body.reason, body.actor)
    return json_response(stored.public())


async def audit_of_one(request: web.Request) -> web.Response:
    service = request.app[MEMORY_REST]
    m = await service.get_memory(request.match_info["id"])
    if m is None or not _may_read(request, m):
        return json_error(404, "memory not found")
    trail = await service.audit_trail(agent_id=m.agent_id, memory_id=m.id, limit=200)
    return json_response({"audit": trail})


async def audit_of_agent(request: web.Request) -> web.Response:
    q = parse_query(request, AuditQuery)  # 400 naming the parameter; 403 for another agent's id
    trail = await request.app[MEMORY_REST].audit_trail(agent_id=q.agent_id, memory_id=None, limit=q.limit)
    return json_response({"audit": trail})


async def list_memories(request: web.Request) -> web.Response:
    q = parse_query(request, ListQuery)  # 400 naming the parameter; 403 for another agent's id
    try:
        after = _cursor_in(q.cursor) if q.cursor else None
    except (ValueError, TypeError, orjson.JSONDecodeError):
        return json_error(400, "cursor: not a cursor this API issued", "cursor")
    page = await request.app[MEMORY_REST].page(
        agent_id=GLOBAL_AGENT if q.scope == "global" else q.agent_id, scope=q.scope, type_=q.type,
        session_id=q.session_id, limit=q.limit + 1, after=after, since=_epoch(q.since), until=_epoch(q.until))
    more = len(page) > q.limit
    page = page[:q.limit]
    return json_response({"memories": [m.public() for m in page],
                          "next_cursor": _cursor_out(page[-1]) if more else None})


async def get_one(request: web.Request) -> web.Response:
    service = request.app[MEMORY_REST]
    m = await service.get_memory(request.match_info["id"])
    if m is None or m.expired() or not _may_read(request, m):
        return json_error(404, "memory not found")
    return json_response(m.public())


async def search(request: web.Request) -> web.Response:
    service = request.app[MEMORY_REST]
    body = await parse(request, SearchBody)
    types = {body.type_filter} if isinstance(body.type_filter, str) else set(body.type_filter or ())
    ranked = await service.search(body.agent_id, body.query, session_id=body.session_id, top_k=body.top_k,
                                  type_filter=types or None, min_importance=body.min_importance)
    return json_response({"results": [{**m.public(), "score": round(s, 4)} for m, s in ranked]})


async def delete(request: web.Request) -> web.Response:
    service = request.app[MEMORY_REST]
    said: dict[str, Any] = {}
    if request.can_read_body:  # {"reason": …, "actor": …}: the inspector's way; `?reason=` for curl
        try:
            doc = orjson.loads(await read_body(request))
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
    await _record_audit(request, "forget", m, None, reason, actor)
    return web.Response(status=204)


# a memory's id is any segment but `search`, so /api/memories/search is only the search (its `Allow`: POST)
ONE = r"/api/memories/{id:(?!search$)[^/]+}"
ROUTES = [
    web.post("/api/memories", store),
    web.get("/api/memories", list_memories),
    web.post("/api/memories/search", search),
    web.get(ONE, get_one),
    web.delete(ONE, delete),
    web.patch(ONE, edit),
    web.get("/api/memories/{id}/audit", audit_of_one),
    web.get("/api/audit", audit_of_agent),
]


def add_api_routes(app: web.Application, service: MemoryRest) -> None:
    app[MEMORY_REST] = service
    app.add_routes(ROUTES)
