"""One client for a memory service's REST API (`/api/memories`, `/api/audit`; CONTRACT and
`memory_adapters/http/rest_api.py`), used by the inspector, the `store_memory` tool and the CLI's
`memory export` / `memory import`: headers, timeouts and what a failure reads like live here once,
as `transport_errors.py` is for the provider. Every failure is one `MemoryServiceError`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import aiohttp
import orjson

from .transport_errors import TransportError, transport_errors

TIMEOUT = aiohttp.ClientTimeout(total=5)
_NOT_JSON = object()


class MemoryServiceError(Exception):
    """The memory service did not do what was asked; the message is for a person.

    `status` is the HTTP status (None: no answer), `detail` the service's own error message (its
    `{"error": {"message": …}}`, else the start of its answer), `unreachable` says nothing answered."""

    def __init__(self, message: str, *, status: int | None = None, detail: str | None = None,
                 unreachable: bool = False, service_message: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail
        self.unreachable = unreachable
        self.service_message = service_message  # only what the service said in its JSON error


@dataclass
class MemoryClient:
    """One agent's memory service, through its REST API."""

    session: aiohttp.ClientSession
    base_url: str
    headers: dict[str, str]
    agent_id: str
    timeout: aiohttp.ClientTimeout = field(default=TIMEOUT)

    async def call(self, method: str, path: str, *, what: str, ok: tuple[int, ...] = (200,),
                   need_json: bool = True, **kw: Any) -> tuple[int, Any]:
        """(status, JSON answer) of one call; anything else raises `MemoryServiceError`."""
        try:
            with transport_errors():
                async with self.session.request(method, self.base_url.rstrip("/") + path, headers=self.headers,
                                                timeout=self.timeout, **kw) as r:
                    status, raw = r.status, await r.read()
        except TransportError as exc:
            raise MemoryServiceError(f"The memory service did not answer ({exc.name}).", unreachable=True) from None
        try:
            doc = orjson.loads(raw) if raw else None
        except orjson.JSONDecodeError:
            doc = _NOT_JSON
        error = doc.get("error") if isinstance(doc, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        message = message[:300] if isinstance(message, str) else None
        if status not in ok:
            raise MemoryServiceError(f"The memory service refused to {what} (status {status}"
                                     + (f": {message}" if message else "") + ").",
                                     status=status, detail=message or raw[:200].decode("utf-8", "replace"),
                                     service_message=message)
        if doc is _NOT_JSON and need_json:
            raise MemoryServiceError(f"The memory service answered {what} with something that is not JSON.",
                                     status=status, detail=raw[:200].decode("utf-8", "replace"))
        return status, (None if doc is _NOT_JSON else doc)

    async def listing(self, *, kind: str | None = None, scope: str | None = None, since: str | None = None,
                      until: str | None = None, cursor: str | None = None,
                      limit: int = 50) -> tuple[list[dict], str | None]:
        params = {"agent_id": self.agent_id, "limit": str(limit)}
        for name, value in (("type", kind), ("scope", scope), ("since", since), ("until", until),
                            ("cursor", cursor)):
            if value:
                params[name] = value
        _, doc = await self.call("GET", "/api/memories", params=params, what="list memories")
        return doc["memories"], doc.get("next_cursor")

    async def search(self, query: str, *, kind: str | None = None, top_k: int = 100) -> list[dict]:
        body: dict[str, Any] = {"agent_id": self.agent_id, "query": query, "top_k": top_k}
        if kind:
            body["type_filter"] = kind
        _, doc = await self.call("POST", "/api/memories/search", json=body, what="search")
        return doc["results"]

    async def get(self, memory_id: str) -> dict | None:
        status, doc = await self.call("GET", f"/api/memories/{quote(memory_id, safe='')}", ok=(200, 404),
                                      what="show the memory")
        return doc if status == 200 and doc.get("agent_id") in (self.agent_id, "*") else None

    async def upsert(self, body: dict[str, Any]) -> tuple[bool, Any]:
        """Store or update a memory by its key: (created, the stored memory)."""
        status, doc = await self.call("POST", "/api/memories", ok=(200, 201), json=body,
                                      need_json=False, what="store the memory")
        return status == 201, doc

    async def edit(self, memory_id: str, changes: dict[str, Any]) -> dict:
        _, doc = await self.call("PATCH", f"/api/memories/{quote(memory_id, safe='')}", json=changes,
                                 what="change the memory")
        return doc

    async def forget(self, memory_id: str, reason: str, actor: str) -> None:
        await self.call("DELETE", f"/api/memories/{quote(memory_id, safe='')}", ok=(200, 202, 204, 404),
                        json={"reason": reason, "actor": actor}, what="forget the memory")

    async def audit(self, memory_id: str | None = None) -> list[dict]:
        if memory_id is None:
            _, doc = await self.call("GET", "/api/audit", params={"agent_id": self.agent_id, "limit": "100"},
                                     what="show the audit trail")
        else:
            _, doc = await self.call("GET", f"/api/memories/{quote(memory_id, safe='')}/audit",
                                     what="show the audit trail")
        return doc["audit"]
