"""The HTTP face every memplane adapter shares: contract endpoints, descriptor, health, auth.

A backend implements recall/retain/forget on typed requests; this module does the wire work
(bearer auth, JSON parsing, 400s that name the field) so backends stay about storage.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from aiohttp import web
from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from pydantic import BaseModel, ValidationError

from memplane_core.contract import (
    ForgetRequest,
    RecalledMemory,
    RecallRequest,
    RetainBatchRequest,
    RetainRequest,
)
from memplane_core.local_trust import (
    HOST_REFUSED_STATUS,
    cross_site,
    is_json_content_type,
    is_loopback_host,
    is_loopback_ip,
)

from .admission import DEFAULT_MAX_RETAINS_IN_FLIGHT, RETRY_AFTER_S, RetainAdmission


class MemoryBackend(Protocol):
    async def recall(self, req: RecallRequest) -> list[RecalledMemory]: ...
    async def retain(self, req: RetainRequest) -> str: ...
    async def forget(self, req: ForgetRequest) -> int: ...
    async def health(self) -> dict[str, Any]: ...


OPEN_PATHS = frozenset({"/health", "/.claw-describe.json"})
# The agent a per-agent token authenticated (typed request key where aiohttp has them).
CALLER_AGENT = web.RequestKey("caller_agent", str) if hasattr(web, "RequestKey") else "caller_agent"
# What a per-agent token was granted beyond its own agent ("global": write shared memories).
CALLER_GRANTS = web.RequestKey("caller_grants", frozenset) if hasattr(web, "RequestKey") else "caller_grants"


@dataclass(frozen=True)
class AgentToken:
    token: str
    grants: frozenset[str] = frozenset()


def load_agent_tokens(path: str | None) -> dict[str, AgentToken] | None:
    """Per-agent tokens from a JSON file: `{agent: token}` or `{agent: {"token": t, "grants": ["global"]}}`."""
    if not path:
        return None
    with open(path) as fh:
        doc = json.load(fh)
    out: dict[str, AgentToken] = {}
    if isinstance(doc, dict):
        for agent, value in doc.items():
            if isinstance(value, str) and value:
                out[agent] = AgentToken(value)
            elif isinstance(value, dict) and isinstance(value.get("token"), str) and value["token"] \
                    and all(isinstance(g, str) for g in value.get("grants", [])):
                out[agent] = AgentToken(value["token"], frozenset(value.get("grants", [])))
            else:
                break
        else:
            return out
    raise ValueError(f"{path}: must be a JSON object of agent id -> token or {{\"token\", \"grants\"}}")


def json_error(status: int, message: str, field: str | None = None, *,
               retry_after_s: int | None = None) -> web.Response:
    body: dict[str, Any] = {"error": {"message": message}}
    if field:
        body["error"]["field"] = field
    headers = {"Retry-After": str(retry_after_s)} if retry_after_s is not None else None
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json", headers=headers)


BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


def local_guard(tokenless: bool):
    """Loopback is not an identity (DESIGN.md, "Local defaults"): web pages in the operator's
    browser are loopback callers too. Refused before auth or parsing: a request a browser made
    for another site (403), a tokenless service reached under a name that is not loopback's
    (421: DNS rebinding), and a body that is not `application/json` (415: a cross-site form or
    `text/plain` fetch needs no CORS preflight)."""

    @web.middleware
    async def middleware(request: web.Request, handler):
        host = request.headers.get("Host")
        if tokenless and is_loopback_ip(request.remote) and not is_loopback_host(host):
            return json_error(HOST_REFUSED_STATUS, "this service answers loopback callers only under a loopback "
                                                   "name (localhost, 127.0.0.1, [::1]); set a token to serve others",
                              "Host")
        why = cross_site(request.headers.get("Origin"), request.headers.get("Sec-Fetch-Site"), host)
        if why is not None:
            return json_error(403, f"cross-site browser requests are refused ({why})", "Origin")
        if request.method in BODY_METHODS and not is_json_content_type(request.headers.get("Content-Type")):
            return json_error(415, "the body must be sent as Content-Type: application/json", "Content-Type")
        return await handler(request)

    return middleware


def public_health(doc: dict[str, Any]) -> dict[str, Any]:
    """`/health` answers without auth: no file paths or URLs (a path tells where the memories live)."""
    return {k: v for k, v in doc.items()
            if k != "data_dir" and not (isinstance(v, str) and ("/" in v or "\\" in v))}


def bearer_auth(token: str | None, agent_tokens: dict[str, AgentToken | str] | None = None):
    """Require the service token on everything but health and the descriptor.

    With per-agent tokens, a caller authenticated as agent A may only name agent A.
    """
    agent_tokens = {a: t if isinstance(t, AgentToken) else AgentToken(t) for a, t in (agent_tokens or {}).items()}

    @web.middleware
    async def middleware(request: web.Request, handler):
        if request.path in OPEN_PATHS or (not token and not agent_tokens):
            return await handler(request)
        header = request.headers.get("Authorization", "")
        given = header[7:].strip() if header[:7].lower() == "bearer " else ""
        if token and given and hmac.compare_digest(given.encode(), token.encode()):
            return await handler(request)
        for agent_id, agent_token in (agent_tokens or {}).items():
            if given and hmac.compare_digest(given.encode(), agent_token.token.encode()):
                request[CALLER_AGENT] = agent_id
                request[CALLER_GRANTS] = agent_token.grants
                return await handler(request)
        return json_error(401, "missing or invalid bearer token")

    return middleware


def first_error(exc: ValidationError, prefix: str = "") -> tuple[str, str]:
    """The field path and message of a validation error's first problem."""
    err = exc.errors()[0]
    field = prefix + (".".join(str(p) for p in err["loc"]) or "<root>")
    return field, f"{field}: {err['msg']}"


async def parse(request: web.Request, model: type[BaseModel]) -> BaseModel:
    try:
        doc = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        raise web.HTTPBadRequest(text=orjson.dumps({"error": {"message": "body is not valid JSON"}}).decode(),
                                 content_type="application/json") from None
    try:
        parsed = model.model_validate(doc)
    except ValidationError as exc:
        field, text = first_error(exc)
        message = {"error": {"message": text, "field": field}}
        raise web.HTTPBadRequest(text=orjson.dumps(message).decode(), content_type="application/json") from None
    caller = request.get(CALLER_AGENT)
    if caller is not None and getattr(parsed, "agent_id", caller) != caller:
        message = {"error": {"message": "agent_id does not match the token", "field": "agent_id"}}
        raise web.HTTPForbidden(text=orjson.dumps(message).decode(), content_type="application/json")
    return parsed


class AdapterMetrics:
    """The service's own Prometheus metrics (`GET /metrics`, behind its token like every route)."""

    def __init__(self, backend: Any) -> None:
        r = self.registry = CollectorRegistry()
        self.recall_latency = Histogram("memplane_adapter_recall_latency_seconds", "Recall handling time.",
                                        buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.3, 1.0), registry=r)
        self.retains = Counter("memplane_adapter_retains", "Retained entries by outcome "
                               "(stored, duplicate, tombstoned, empty, refused; busy: a call shed with 503).", ["outcome"], registry=r)
        memories = Gauge("memplane_adapter_memories", "Memories in the loaded indexes.", registry=r)
        memories.set_function(lambda: float(getattr(backend, "loaded_memories", lambda: 0)()))
        queue = Gauge("memplane_adapter_ingest_queue_depth", "Memories waiting for their embedding.", registry=r)
        queue.set_function(lambda: float(getattr(backend, "embedding_backlog", 0) or 0))
        for collector in getattr(backend, "metric_collectors", ()):  # e.g. the curator's (engine/curator/metrics.py)
            r.register(collector)

    def render(self) -> bytes:
        return generate_latest(self.registry)


def build_adapter_app(backend: MemoryBackend, descriptor: dict[str, Any], *, token: str | None = None,
                      agent_tokens: dict[str, AgentToken | str] | None = None,
                      max_retains_in_flight: int = DEFAULT_MAX_RETAINS_IN_FLIGHT) -> web.Application:
    app = web.Application(middlewares=[local_guard(not token and not agent_tokens), bearer_auth(token, agent_tokens)],
                          client_max_size=32 * 1024 * 1024)
    metrics = AdapterMetrics(backend)
    admission = RetainAdmission(max_retains_in_flight)

    def busy() -> web.Response:
        metrics.retains.labels("busy").inc()
        return json_error(503, f"memory service is busy ({admission.limit} retains in hand, shared fairly "
                               f"between agents); retry after {RETRY_AFTER_S} s", retry_after_s=RETRY_AFTER_S)

    async def recall(request: web.Request) -> web.Response:
        req = await parse(request, RecallRequest)
        with metrics.recall_latency.time():
            blocks = await backend.recall(req)
        answer: dict[str, Any] = {"memories": [b.model_dump(exclude_none=True) for b in blocks]}
        if isinstance(getattr(blocks, "ranking", None), str):  # which ranking answered (engine/schedule.py)
            answer["ranking"] = blocks.ranking
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    async def retain(request: web.Request) -> web.Response:
        req = await parse(request, RetainRequest)
        with admission.slot(req.agent_id) as admitted:
            if not admitted:
                return busy()
            outcome = await backend.retain(req)
        metrics.retains.labels(outcome).inc()
        return web.Response(status=202, body=orjson.dumps({"status": outcome, "id": req.entry["id"]}),
                            content_type="application/json")

    async def retain_batch(request: web.Request) -> web.Response:
        """Each item is retained as if posted alone, in order; an invalid item gets its own 400
        while the rest go on. A backend failure fails the whole call, which callers retry
        (retain is idempotent by entry id)."""
        batch = await parse(request, RetainBatchRequest)
        with admission.slot(batch.agent_id) as admitted:
            return await retain_items(batch) if admitted else busy()

    async def retain_items(batch: RetainBatchRequest) -> web.Response:
        results: list[dict[str, Any]] = []
        valid: list[tuple[int, RetainRequest]] = []
        many = getattr(backend, "retain_many", None)
        for i, item in enumerate(batch.items):
            try:
                # the batch's agent wins: a per-agent token must not retain into another agent
                req = RetainRequest.model_validate({**item, "agent_id": batch.agent_id, "pod": batch.pod})
            except ValidationError as exc:
                field, text = first_error(exc, f"items.{i}.")
                entry = item.get("entry")
                results.append({"id": entry.get("id") if isinstance(entry, dict) else None, "code": 400,
                                "error": text, "field": field})
                metrics.retains.labels("refused").inc()
                continue
            if many is not None:
                results.append({"id": req.entry["id"], "code": 202})
                valid.append((len(results) - 1, req))
            else:
                results.append({"id": req.entry["id"], "code": 202, "status": await backend.retain(req)})
        if valid:  # one store transaction for the whole batch
            for (slot, _), outcome in zip(valid, await many([r for _, r in valid])):
                results[slot]["status"] = outcome
        for r in results:
            if r.get("status"):
                metrics.retains.labels(r["status"]).inc()
        return web.Response(body=orjson.dumps({"results": results}), content_type="application/json")

    async def forget(request: web.Request) -> web.Response:
        req = await parse(request, ForgetRequest)
        await backend.forget(req)
        return web.Response(status=204)

    async def health(request: web.Request) -> web.Response:
        return web.json_response(public_health(await backend.health()))

    async def describe(request: web.Request) -> web.Response:
        return web.json_response(descriptor)

    memory = descriptor.get("memory", {})
    for name, handler in (("recall", recall), ("retain", retain), ("forget", forget)):
        if name in memory:
            app.router.add_post(memory[name]["path"], handler)
    if memory.get("retain", {}).get("batch_path"):
        app.router.add_post(memory["retain"]["batch_path"], retain_batch)
    async def metrics_route(request: web.Request) -> web.Response:
        return web.Response(body=metrics.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics_route)
    app.router.add_get("/.claw-describe.json", describe)
    return app
