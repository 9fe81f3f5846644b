"""The REST API for people and tools: /api/memories (store, list, get, search, delete)."""

from __future__ import annotations

import base64
import time
from datetime import datetime
from typing import Any, Literal

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from memplane_core.ids import AGENT_ID_PATTERN

from ..server import CALLER_AGENT, json_error, parse
from .ltm import LTMUnavailable
from ..engine.record import GLOBAL_AGENT, Memory
from .service import TieredMemory


class StoreBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent_id: str = Field(pattern=AGENT_ID_PATTERN)
    scope: Literal["session", "agent", "global"] = "agent"
    session_id: str | None = None
    key: str = Field(min_length=1, max_length=256)
    value: str = Field(min_length=1, max_length=65536)
    type: Literal["fact", "preference", "episode", "strategy_outcome", "constraint"] = "fact"
    importance: float = Field(default=0.5, ge=0.0, le=1.0)
    ttl: int | str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _session_needs_id(self) -> "StoreBody":
        if self.scope == "session" and not self.session_id:
            raise ValueError("session_id is required when scope is 'session'")
        return self

    @field_validator("ttl")
    @classmethod
    def _ttl(cls, v: int | str | None) -> int | str | None:
        if isinstance(v, int) and v <= 0:
            raise ValueError("ttl seconds must be positive")
        if isinstance(v, str):
            datetime.fromisoformat(v.replace("Z", "+00:00"))
        return v

    def expires_at(self) -> float | None:
        if self.ttl is None:
            return None
        if isinstance(self.ttl, int):
            return time.time() + self.ttl
        return datetime.fromisoformat(self.ttl.replace("Z", "+00:00")).timestamp()


class SearchBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent_id: str = Field(pattern=AGENT_ID_PATTERN)
    query: str = Field(min_length=1)
    top_k: int = Field(default=10, ge=1, le=100)
    type_filter: list[str] | str | None = None
    min_importance: float | None = Field(default=None, ge=0.0, le=1.0)
    session_id: str | None = None


def _json(doc: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=orjson.dumps(doc), content_type="application/json")


def _cursor_out(m: Memory) -> str:
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


def _owned(request: web.Request, m: Memory | None) -> bool:
    caller = request.get(CALLER_AGENT)
    return m is not None and (caller is None or m.agent_id == caller or m.metadata.get("author") == caller)


def add_api_routes(app: web.Application, service: TieredMemory) -> None:
    async def store(request: web.Request) -> web.Response:
        body = await parse(request, StoreBody)  # 400 naming the field; 403 for another agent's id
        agent = GLOBAL_AGENT if body.scope == "global" else body.agent_id
        meta = dict(body.metadata)
        if body.scope == "global":
            meta.setdefault("author", body.agent_id)
        m = Memory(agent_id=agent, scope=body.scope, key=body.key, value=body.value, type=body.type,
                   importance=body.importance, session_id=body.session_id if body.scope == "session" else None,
                   expires_at=body.expires_at(), metadata=meta)
        stored, created = await service.store(m)
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
        query: dict[str, Any] = {"agent_id": GLOBAL_AGENT if q.get("scope") == "global" else agent_id}
        if q.get("scope"):
            if q["scope"] not in ("session", "agent", "global"):
                return json_error(400, "scope: must be session, agent or global", "scope")
            query["scope"] = q["scope"]
        if q.get("type"):
            query["type"] = q["type"]
        if q.get("session_id"):
            query["session_id"] = q["session_id"]
        query["live_until"] = {"$gt": time.time()}
        try:
            after = _cursor_in(q["cursor"]) if q.get("cursor") else None
        except (ValueError, TypeError, orjson.JSONDecodeError):
            return json_error(400, "cursor: not a cursor this API issued", "cursor")
        page = await service.ltm.page(query, limit + 1, after)
        more = len(page) > limit
        page = page[:limit]
        return _json({"memories": [m.public() for m in page], "next_cursor": _cursor_out(page[-1]) if more else None})

    async def get_one(request: web.Request) -> web.Response:
        m = await service.ltm.get(request.match_info["id"])
        if m is None or m.expired() or not (_owned(request, m) or m.scope == "global"):
            return json_error(404, "memory not found")
        return _json(m.public())

    async def search(request: web.Request) -> web.Response:
        body = await parse(request, SearchBody)
        types = {body.type_filter} if isinstance(body.type_filter, str) else set(body.type_filter or ())
        ranked = await service.rank(body.agent_id, body.query, session_id=body.session_id, top_k=body.top_k,
                                    type_filter=types or None, min_importance=body.min_importance,
                                    include_recent=False)
        return _json({"results": [{**m.public(), "score": round(s, 4)} for m, s in ranked]})

    async def delete(request: web.Request) -> web.Response:
        m = await service.ltm.get(request.match_info["id"])
        if not _owned(request, m) or not await service.delete(m.id):
            return json_error(404, "memory not found")
        return web.Response(status=204)

    app.router.add_post("/api/memories", store)
    app.router.add_get("/api/memories", list_memories)
    app.router.add_post("/api/memories/search", search)
    app.router.add_get("/api/memories/{id}", get_one)
    app.router.add_delete("/api/memories/{id}", delete)


@web.middleware
async def ltm_unavailable_middleware(request: web.Request, handler):
    """MongoDB down: a clear 503, never a traceback; nothing was half-written (Mongo goes first)."""
    try:
        return await handler(request)
    except LTMUnavailable:
        return json_error(503, "long-term memory store (MongoDB) is unavailable; nothing was stored")
