"""The contract's endpoints (recall, retain, batch, forget), descriptor, health and metrics.

A backend implements recall/retain/forget on typed requests; the handlers here do the wire work
so backends stay about storage. Handlers are module-level and find their parts in the app
(`ADAPTER`); the route table is built from the descriptor, which names the contract's paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from pydantic import ValidationError

from memplane_core.arrival import waited_s
from memplane_core.contract import (
    ForgetRequest,
    RecalledMemory,
    RecallRequest,
    RetainBatchRequest,
    RetainRequest,
    UNREADABLE,
)

from .admission import DEFAULT_MAX_RETAINS_IN_FLIGHT, RETRY_AFTER_S, RetainAdmission
from .auth import AgentToken, bearer_auth
from .bodies import parse
from .errors import error_doc, first_error, json_error, json_response
from .guard import local_guard
from .openapi import openapi_document


class MemoryBackend(Protocol):
    async def recall(self, req: RecallRequest) -> list[RecalledMemory]: ...
    async def retain(self, req: RetainRequest) -> str: ...
    async def forget(self, req: ForgetRequest) -> int: ...
    async def health(self) -> dict[str, Any]: ...


def public_health(doc: dict[str, Any]) -> dict[str, Any]:
    """`/health` answers without auth: no file paths or URLs (a path tells where the memories live)."""
    return {k: v for k, v in doc.items()
            if k != "data_dir" and not (isinstance(v, str) and ("/" in v or "\\" in v))}


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


@dataclass(frozen=True)
class Adapter:
    """What the contract handlers work with."""
    backend: MemoryBackend
    descriptor: dict[str, Any]
    metrics: AdapterMetrics
    admission: RetainAdmission

    def busy(self) -> web.Response:
        self.metrics.retains.labels("busy").inc()
        return json_error(503, f"memory service is busy ({self.admission.limit} retains in hand, shared fairly "
                               f"between agents); retry after {RETRY_AFTER_S} s", retry_after_s=RETRY_AFTER_S)


ADAPTER = web.AppKey("adapter", Adapter)
UNREADABLE_TEXT = "the service could not read this entry (see its retain_entry_unreadable log line); it is not retried"


async def recall(request: web.Request) -> web.Response:
    a = request.app[ADAPTER]
    req = await parse(request, RecallRequest)
    waited = waited_s(request)
    if req.deadline_ms is not None and waited:
        # the proxy's wait began when it sent: time queued behind other handlers counts (CONTRACT §5),
        # so a recall that waited uses the cheaper ranking it has rather than answer too late
        req = req.model_copy(update={"deadline_ms": max(0, int(req.deadline_ms - 1000 * waited))})
    with a.metrics.recall_latency.time():
        blocks = await a.backend.recall(req)
    answer: dict[str, Any] = {"memories": [b.model_dump(exclude_none=True) for b in blocks]}
    if isinstance(getattr(blocks, "ranking", None), str):  # which ranking answered (engine/schedule.py)
        answer["ranking"] = blocks.ranking
        why = getattr(blocks, "degraded", None)
        if isinstance(why, str) and why:  # less than the usual ranking answered (CONTRACT §5 `degraded`): the proxy marks the turn
            answer["degraded"] = why
    return json_response(answer)


async def retain(request: web.Request) -> web.Response:
    a = request.app[ADAPTER]
    req = await parse(request, RetainRequest)
    with a.admission.slot(req.agent_id) as admitted:
        if not admitted:
            return a.busy()
        outcome = await a.backend.retain(req)
    a.metrics.retains.labels(outcome).inc()
    if outcome == UNREADABLE:
        return json_response({**error_doc(UNREADABLE_TEXT, "entry"), "status": outcome, "id": req.entry["id"]}, 422)
    return json_response({"status": outcome, "id": req.entry["id"]}, 202)


async def retain_batch(request: web.Request) -> web.Response:
    """Each item is retained as if posted alone, in order; an invalid item gets its own 400
    while the rest go on. A backend failure fails the whole call, which callers retry
    (retain is idempotent by entry id)."""
    a = request.app[ADAPTER]
    batch = await parse(request, RetainBatchRequest)
    with a.admission.slot(batch.agent_id) as admitted:
        return json_response({"results": await _retain_items(a, batch)}) if admitted else a.busy()


async def _retain_items(a: Adapter, batch: RetainBatchRequest) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    valid: list[tuple[int, RetainRequest]] = []
    many = getattr(a.backend, "retain_many", None)
    for i, item in enumerate(batch.items):
        try:
            # the batch's agent wins: a per-agent token must not retain into another agent
            req = RetainRequest.model_validate({**item, "agent_id": batch.agent_id, "pod": batch.pod})
        except ValidationError as exc:
            field, text = first_error(exc, f"items.{i}.")
            entry = item.get("entry")
            results.append({"id": entry.get("id") if isinstance(entry, dict) else None, "code": 400,
                            "error": text, "field": field})
            a.metrics.retains.labels("refused").inc()
            continue
        if many is not None:
            results.append({"id": req.entry["id"], "code": 202})
            valid.append((len(results) - 1, req))
        else:
            results.append({"id": req.entry["id"], "code": 202, "status": await a.backend.retain(req)})
    if valid:  # one store transaction for the whole batch
        for (slot, _), outcome in zip(valid, await many([r for _, r in valid])):
            results[slot]["status"] = outcome
    for i, r in enumerate(results):
        if r.get("status"):
            a.metrics.retains.labels(r["status"]).inc()
        if r.get("status") == UNREADABLE:  # that item's own refusal: the proxy does not retry it
            r.update(code=422, error=UNREADABLE_TEXT, field=f"items.{i}.entry")
    return results


async def forget(request: web.Request) -> web.Response:
    req = await parse(request, ForgetRequest)
    await request.app[ADAPTER].backend.forget(req)
    return web.Response(status=204)


async def health(request: web.Request) -> web.Response:
    return web.json_response(public_health(await request.app[ADAPTER].backend.health()))


async def describe(request: web.Request) -> web.Response:
    return web.json_response(request.app[ADAPTER].descriptor)


async def openapi(request: web.Request) -> web.Response:
    """The service's API as OpenAPI 3.1 (openapi.py): the descriptor's paths, and the REST API when mounted."""
    rest = any(r.canonical == "/api/memories" for r in request.app.router.resources())
    return json_response(openapi_document(request.app[ADAPTER].descriptor, rest=rest))


async def metrics(request: web.Request) -> web.Response:
    return web.Response(body=request.app[ADAPTER].metrics.render(),
                        headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})


ROUTES = [
    web.get("/health", health),
    web.get("/metrics", metrics),
    web.get("/.claw-describe.json", describe),
    web.get("/openapi.json", openapi),
]
CONTRACT_HANDLERS = {"recall": recall, "retain": retain, "forget": forget}


def contract_routes(descriptor: dict[str, Any]) -> list[web.RouteDef]:
    """The contract's endpoints at the paths the descriptor announces (only those it offers)."""
    memory = descriptor.get("memory", {})
    routes = [web.post(memory[name]["path"], handler) for name, handler in CONTRACT_HANDLERS.items() if name in memory]
    if memory.get("retain", {}).get("batch_path"):
        routes.append(web.post(memory["retain"]["batch_path"], retain_batch))
    return routes


def build_adapter_app(backend: MemoryBackend, descriptor: dict[str, Any], *, token: str | None = None,
                      agent_tokens: dict[str, AgentToken | str] | None = None,
                      max_retains_in_flight: int = DEFAULT_MAX_RETAINS_IN_FLIGHT) -> web.Application:
    app = web.Application(middlewares=[local_guard(not token and not agent_tokens), bearer_auth(token, agent_tokens)],
                          client_max_size=32 * 1024 * 1024)
    app[ADAPTER] = Adapter(backend, descriptor, AdapterMetrics(backend), RetainAdmission(max_retains_in_flight))
    app.add_routes(contract_routes(descriptor) + ROUTES)
    return app
