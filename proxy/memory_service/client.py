"""One client for a memory service: the contract's recall, retain, batched retain, forget and
descriptor (CONTRACT §3, §5–§7), and the REST API (`/api/memories`, `/api/audit`;
`memory_adapters/http/rest_api.py`). Bodies are the contract's models; the HTTP exchange, its
headers and timeouts, and what a library failure becomes live in `_send`, once.

Each endpoint then reads a failure its own way: recall as "no memories" (never raises), retain as
`RetryableRetainError` (delivery tries again), forget and the REST API as `MemoryServiceError`.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import quote

import aiohttp
import orjson
from pydantic import BaseModel

from manifests.models import MemoryManifest
from manifests.validate import ManifestError, validate
from memplane_core.contract import (
    DEFAULT_WRITE_TIMEOUT_MS,
    MAX_FORGET_IDS,
    ForgetRequest,
    RecallRequest,
    RetainBatchRequest,
    RetainRequest,
)

from ..transport_errors import TransportError, transport_errors
from .answers import MAX_RECALL_BYTES, RecallOutcome, batch_codes, deadline_ms, read_recall, retry_after
from .deadlines import RecallDeadlines
from .errors import BatchUnsupported, MemoryServiceError, RetryableRetainError

REST_TIMEOUT = aiohttp.ClientTimeout(total=5)
_NO_TIMEOUT = aiohttp.ClientTimeout(total=None)  # recall: its asyncio deadline is the one limit
DESCRIBE_PATH = "/.claw-describe.json"
_NOT_JSON = object()


class Answer(NamedTuple):
    status: int
    body: bytes | None  # None: longer than the limit the call set
    retry_after: str | None  # the Retry-After header, as sent


def wire(model: BaseModel, **more: Any) -> bytes:
    """A contract body as the proxy sends it: the fields that are set (None is left out), then
    `more`, as orjson writes them. Not `model_dump`: it walks every nested message (measured: 6x
    orjson's time for a 150 KB recall body)."""
    return orjson.dumps({**{k: v for k, v in model.__dict__.items() if v is not None}, **more})


async def _read_limited(resp: aiohttp.ClientResponse, limit: int) -> bytes | None:
    data = bytearray()
    async for chunk in resp.content.iter_chunked(8192):
        data += chunk
        if len(data) > limit:
            return None
    return bytes(data)


def _write_timeout(endpoint: Any) -> aiohttp.ClientTimeout:
    return aiohttp.ClientTimeout(total=(endpoint.timeout_ms if endpoint else DEFAULT_WRITE_TIMEOUT_MS) / 1000)


GRACE_STEPS = 4  # event-loop turns an answer already in the socket gets to finish in (`_within`)
STALLED_S = 0.005  # a timeout noticed this late: the proxy itself was held up (off the CPU, a long step)
LINGER_S = 1.0  # how long a timed-out exchange may still read its answer, to keep its connection
LINGERING_MAX = 64  # timed-out exchanges left to finish at once; past this one is cancelled (closed)
_lingering: weakref.WeakSet[asyncio.Task] = weakref.WeakSet()  # kept alive by their timers


async def _within(exchange: Awaitable[Answer], seconds: float) -> Answer:
    """`exchange` if it finishes within `seconds`, else TimeoutError — except that an answer already
    in hand when a held-up proxy notices the timeout is used. Why: on a host whose cores are all
    taken the proxy's own process can be off the CPU when the answer comes; when it runs again the
    answer and the timeout are due in the same turn of the event loop, and a plain timeout
    (asyncio.timeout, wait_for) wins that tie and throws the answer away (a loopback service that
    answered at 280 ms, the proxy descheduled from 250 to 320 ms: timed out 10 times of 10). The
    timeout bounds how long memory makes the agent wait; an answer that is already there when the
    proxy gets to look costs the agent nothing more. So the exchange runs as its own task and, when
    the timeout was noticed late (by STALLED_S or more), gets a few loop turns to finish from what
    already arrived. On a proxy that notices its timeout on time nothing changes: an answer still
    on its way is timed out. The task costs ~10 µs a recall (16 against 7 µs for asyncio.timeout
    around a trivial exchange, measured)."""
    loop = asyncio.get_running_loop()
    due = loop.time() + seconds
    task = asyncio.ensure_future(exchange)
    try:
        done, _ = await asyncio.wait((task,), timeout=seconds)
        held_up = not done and loop.time() - due >= STALLED_S
        for _ in range(GRACE_STEPS if held_up else 0):
            await asyncio.sleep(0)
            if task.done():
                break
    except BaseException:
        if not task.done():  # the turn itself was cancelled (the agent went away)
            task.cancel()
            task.add_done_callback(_consume)  # whatever it ends with now, no one waits for it
        raise
    if not task.done():
        _linger(task, loop)
        raise TimeoutError
    return task.result()


def _linger(task: asyncio.Task, loop: asyncio.AbstractEventLoop) -> None:
    """A timed-out exchange reads the rest of its answer in the background (at most LINGER_S),
    unseen. Why: cancelled half-way, its keep-alive connection is closed, and the next recall opens
    a new one — at 32 turns in flight on a saturated host a third of the embedded engine's recalls
    timed out, and opening their connections again was 8 % of the proxy's CPU (the service does the
    recall either way: its handler is not cancelled when the client leaves). Bounded: past
    LINGERING_MAX such exchanges (a stalled service) the next one is cancelled as before."""
    task.add_done_callback(_consume)  # whatever it ends with now, no one waits for it
    if len(_lingering) >= LINGERING_MAX:
        task.cancel()
        return
    _lingering.add(task)
    stop = loop.call_later(LINGER_S, task.cancel)
    task.add_done_callback(lambda t: (_lingering.discard(t), stop.cancel()))


def _consume(task: asyncio.Task) -> None:
    if not task.cancelled():
        task.exception()


@dataclass
class MemoryService:
    """One agent's memory service. `manifest` gives the contract endpoints' paths and timeouts;
    the REST API needs only `base_url` and `headers` (the CLI's `--url`/`--auth-token`)."""

    session: aiohttp.ClientSession
    base_url: str
    headers: dict[str, str]
    agent_id: str
    pod: str = ""
    manifest: MemoryManifest | None = None
    timeout: aiohttp.ClientTimeout = field(default=REST_TIMEOUT)  # one REST call's
    retain_url: str | None = None  # another retain endpoint than the manifest's (backfill --url)
    deadlines: RecallDeadlines | None = None  # the proxy's: what recall tells the service it has

    @classmethod
    def of(cls, session: aiohttp.ClientSession, manifest: MemoryManifest, agent_id: str, pod: str = "", *,
           token: str | None = None, retain_url: str | None = None,
           timeout: aiohttp.ClientTimeout = REST_TIMEOUT, deadlines: RecallDeadlines | None = None) -> MemoryService:
        headers = {"Authorization": f"Bearer {token}"} if token else manifest.headers()
        return cls(session, manifest.base_url, headers, agent_id, pod, manifest, timeout, retain_url, deadlines)

    async def _send(self, method: str, url: str, *, body: bytes | None = None, timeout: aiohttp.ClientTimeout,
                    params: Any = None, limit: int | None = None, deadline_s: float | None = None) -> Answer:
        """One exchange. Every way it can fail without an answer is one `MemoryServiceError`
        (`unreachable`, maybe `timed_out`), mapped here from `transport_errors()`."""
        headers = self.headers if body is None else {**self.headers, "Content-Type": "application/json"}

        async def exchange() -> Answer:
            async with self.session.request(method, url, data=body, headers=headers, params=params,
                                            timeout=timeout) as resp:
                data = await (resp.read() if limit is None else _read_limited(resp, limit))
                return Answer(resp.status, data, resp.headers.get("Retry-After"))
        try:
            with transport_errors():
                return await (exchange() if deadline_s is None else _within(exchange(), deadline_s))
        except TransportError as exc:
            raise MemoryServiceError(f"The memory service did not answer ({exc.name}).", unreachable=True,
                                     timed_out=exc.timed_out, reason=exc.name) from None

    # -- the contract (CONTRACT §5–§7) --

    async def recall(self, request: RecallRequest) -> RecallOutcome:
        """Memories for one turn within the manifest's hard timeout (or already in hand when a
        held-up proxy notices it: `_within`); anything else is an outcome that says why there are
        none. Never raises."""
        assert self.manifest is not None and self.manifest.recall is not None
        endpoint = self.manifest.recall
        url = self.manifest.url(endpoint)
        started = time.perf_counter()
        key = RecallDeadlines.key_of(self.agent_id, url)
        sent = (self.deadlines.deadline_ms(key, endpoint.timeout_ms) if self.deadlines is not None
                else deadline_ms(endpoint.timeout_ms))
        body = wire(request, deadline_ms=sent)
        try:
            answer = await self._send("POST", url, body=body, timeout=_NO_TIMEOUT,
                                      limit=MAX_RECALL_BYTES, deadline_s=endpoint.timeout_ms / 1000)
            outcome = read_recall(answer.status, answer.body)
        except MemoryServiceError as exc:
            outcome = (RecallOutcome("timed_out", error=f"no answer within {endpoint.timeout_ms} ms")
                       if exc.timed_out else RecallOutcome("failed", error=exc.reason))
        outcome.latency_ms = (time.perf_counter() - started) * 1000
        outcome.deadline_ms = sent
        if self.deadlines is not None and outcome.status != "failed":  # a refusal says nothing of the way back
            self.deadlines.observe(key, sent, outcome.latency_ms, outcome.status == "timed_out")
        return outcome

    async def _write(self, url: str, request: BaseModel) -> Answer:
        """A retain or batch POST; a transport failure, 5xx or 429 raises RetryableRetainError."""
        body = wire(request)  # an entry that cannot be serialised raises here, as itself
        try:
            answer = await self._send("POST", url, body=body, timeout=_write_timeout(
                self.manifest.retain if self.manifest else None))
        except MemoryServiceError as exc:
            raise RetryableRetainError(exc.reason) from None
        if answer.status >= 500 or answer.status == 429:
            raise RetryableRetainError(f"status {answer.status}", retry_after(answer.retry_after), status=answer.status)
        return answer

    async def retain(self, metadata: dict[str, Any], entry: dict[str, Any]) -> int:
        """POST one retain; its status (2xx stored, 4xx refused for good)."""
        assert self.retain_url or (self.manifest is not None and self.manifest.retain is not None)
        url = self.retain_url or self.manifest.url(self.manifest.retain)
        answer = await self._write(url, RetainRequest.model_construct(
            agent_id=self.agent_id, pod=self.pod, metadata=metadata, entry=entry))
        return answer.status

    async def retain_batch(self, items: list[tuple[dict[str, Any], dict[str, Any]]]) -> list[int]:
        """POST (metadata, entry) pairs together to `retain.batch_path`; each item's status.

        The whole call failing (transport, 5xx, 429) raises RetryableRetainError: every item is
        retried, services dedupe by entry id. A whole-call 4xx is every item's status."""
        url = self.manifest.batch_url() if self.manifest is not None else None
        assert url is not None
        answer = await self._write(url, RetainBatchRequest.model_construct(
            agent_id=self.agent_id, pod=self.pod, items=[{"metadata": m, "entry": e} for m, e in items]))
        if answer.status in (404, 405):
            raise BatchUnsupported(f"status {answer.status}", status=answer.status)
        if not 200 <= answer.status < 300:
            return [answer.status] * len(items)
        return batch_codes(answer.body or b"", len(items))

    async def forget(self, entry_ids: list[str], reason: str) -> int | None:
        """Forget ledger entries (CONTRACT §7) in calls of at most MAX_FORGET_IDS ids (services
        refuse more: 400); the last status. The first call that fails raises MemoryServiceError."""
        assert self.manifest is not None and self.manifest.forget is not None
        endpoint = self.manifest.forget
        status = None
        for i in range(0, len(entry_ids), MAX_FORGET_IDS):
            request = ForgetRequest.model_construct(agent_id=self.agent_id, pod=self.pod,
                                                    entry_ids=entry_ids[i:i + MAX_FORGET_IDS], reason=reason)
            answer = await self._send("POST", self.manifest.url(endpoint), body=wire(request),
                                      timeout=_write_timeout(endpoint))
            status = answer.status
            if not 200 <= status < 300:
                raise MemoryServiceError(f"The memory service refused to forget (status {status}).", status=status)
        return status

    async def describe(self, url: str | None = None) -> dict[str, Any]:
        """The service's descriptor (`GET /.claw-describe.json`, CONTRACT §3), checked against its
        schema; `url`: one published elsewhere (the pod compiler's `--describe SERVICE=URL`)."""
        url = url or self.base_url.rstrip("/") + DESCRIBE_PATH
        _, doc = await self.call("GET", "", url=url, what="describe itself")
        try:
            return validate("describe", doc, url)
        except ManifestError as exc:
            raise MemoryServiceError(f"The memory service's descriptor is not valid: {exc}") from None

    # -- the REST API --

    async def call(self, method: str, path: str, *, what: str, ok: tuple[int, ...] = (200,),
                   need_json: bool = True, json: Any = None, params: Any = None,
                   url: str | None = None) -> tuple[int, Any]:
        """(status, JSON answer) of one REST call to `path` (or to a whole `url`); anything else
        raises `MemoryServiceError`."""
        answer = await self._send(method, url or self.base_url.rstrip("/") + path, params=params,
                                  timeout=self.timeout, body=None if json is None else orjson.dumps(json))
        status, raw = answer.status, answer.body or b""
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

    async def delete(self, memory_id: str, reason: str, actor: str) -> None:
        """Forget one memory by its id (the REST API; `forget` forgets ledger entries)."""
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
