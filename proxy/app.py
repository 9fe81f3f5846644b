"""The aiohttp application: routes, error middleware, and the lifecycle of shared clients."""

from __future__ import annotations

import asyncio
import os
import time
import traceback

import aiohttp
import orjson
from aiohttp import web

from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry

from .agent_shares import AgentShares
from .config import ProxySettings
from .context_store import ContextStore
from .errors import ProxyError, error_response
from .formats import FORMATS, dialect_for_path, provider_for_path
from .forward_policy import (allowed, check_passthrough_body, check_raw_path, parse_allow_list,
                             require_model_allowed)
from .header_logs import quiet_header_values
from .ledger.files import Ledger
from .mcp import add_mcp_routes
from .operator.admin import admin_only
from .operator.explain import explanation
from .operator.metrics import CONTENT_TYPE_LATEST, ProxyMetrics
from .operator.ui import add_ui_routes
from .rate_limit import RateLimiter
from .retain.delivery import RetainDelivery
from .state import ProxyState
from .tracing import Tracing
from .transport_errors import read_request_body
from .turn import authenticate, handle_turn, open_upstream
from .upstream import passthrough_url, returned_headers, upstream_headers

STATE = web.AppKey("memplane_state", ProxyState)


@web.middleware
async def errors_middleware(request: web.Request, handler):
    """Every failure leaves as a JSON error in the caller's provider dialect, never a traceback.

    A path that could be read two ways is refused here, before routing or authentication."""
    def dialect():  # worked out only for an error: most requests never need it
        return dialect_for_path(request.path, request.headers)

    try:
        check_raw_path(request.raw_path)
        return await handler(request)
    except ProxyError as err:
        return error_response(dialect(), err)
    except web.HTTPRequestEntityTooLarge as exc:
        return error_response(dialect(), ProxyError(413, f"Request body too large ({exc.text}).",
                                                    code="request_too_large"))
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return error_response(dialect(), ProxyError(exc.status, exc.reason))
    except Exception as exc:
        state = request.app[STATE]
        state.telemetry.error("unhandled_error", path=request.path, error=type(exc).__name__,
                                  where=traceback.format_exc(limit=3).splitlines()[-1])
        return error_response(dialect(), ProxyError(500, "Internal proxy error.", code="internal_error"))


def _turn_route(fmt):
    async def route(request: web.Request) -> web.StreamResponse:
        state = request.app[STATE]
        with state.tracing.turn(fmt.name, fmt.provider, request) as traced:  # a no-op unless OTEL_* is set
            return traced.answered(await handle_turn(request, fmt, state))
    return route


async def healthz(request: web.Request) -> web.Response:
    # the pid: which worker answered (`memplane serve --workers N`), to match with its logs
    return web.json_response({"status": "ok", "pid": os.getpid()})


async def passthrough(request: web.Request) -> web.StreamResponse:
    """A /v1/* call on the operator's allow-list goes to the provider as-is, with the operator's key;
    anything else is 404. Each one is logged (`request`, with the agent and path)."""
    state = request.app[STATE]
    started = time.perf_counter()
    ctx = await authenticate(request, state)
    path = request.path
    if not allowed(state.passthrough, request.method, path):
        state.telemetry.request(agent_id=ctx.agent_id, path=path, method=request.method, status_code=404,
                                passthrough=True, refused="not on the pass-through allow-list")
        raise ProxyError(404, f"{request.method} {path} is not served by this proxy.", code="not_found")
    raw_path = request.raw_path.split("?", 1)[0].split("#", 1)[0]
    if not raw_path.startswith("/v1/"):  # `/%761/models`: the route matched the decoded path only
        raise ProxyError(400, "The request path holds an encoded '/v1/'; send the plain path.", code="invalid_path")
    provider = provider_for_path(path, request.headers)
    body = await read_request_body(request)
    check_passthrough_body(ctx.metadata.allowed_models, request.content_type,
                           request.headers.get("Content-Type", ""), body)
    if request.match_info.get("tail", "").startswith("models/"):
        require_model_allowed(ctx.metadata.allowed_models, path.rsplit("/", 1)[-1])
    headers = upstream_headers(state.settings, provider, request.headers, client_key=ctx.metadata.client_provider_key)
    if body and request.content_type == "multipart/form-data":
        headers["Content-Type"] = request.headers["Content-Type"]  # with its boundary
    upstream = await open_upstream(state, request.method, passthrough_url(state.settings, provider, raw_path),
                                   data=body or None, headers=headers, params=request.query)
    async with upstream:
        resp = web.StreamResponse(status=upstream.status, headers=returned_headers(upstream.headers))
        await resp.prepare(request)
        async for chunk in upstream.content.iter_any():
            await resp.write(chunk)
        await resp.write_eof()
    state.telemetry.request(agent_id=ctx.agent_id, path=path, method=request.method, status_code=upstream.status,
                            passthrough=True, latency_ms=round((time.perf_counter() - started) * 1000, 3))
    return resp


async def metrics(request: web.Request) -> web.Response:
    admin_only(request, request.app[STATE].settings)
    state = request.app[STATE]
    return web.Response(body=state.metrics.render(), headers={"Content-Type": CONTENT_TYPE_LATEST})


async def explain_turn(request: web.Request) -> web.Response:
    admin_only(request, request.app[STATE].settings)
    await request.app[STATE].explanations.fetch(request.match_info["turn_id"])  # another replica's turn
    doc = explanation(request.app[STATE], request.match_info["turn_id"])
    if doc is None:
        raise ProxyError(404, "No such turn (explanations are kept for the most recent turns).", code="not_found")
    return web.Response(body=orjson.dumps(doc), content_type="application/json")


def build_state(settings: ProxySettings, telemetry: Telemetry | None = None) -> ProxyState:
    telemetry = telemetry or Telemetry()
    metrics_ = ProxyMetrics()
    telemetry.observers.append(metrics_.observe_memory_op)
    if settings.ledger == "redis":
        from .scale.wiring import shared_state_for

        return shared_state_for(settings, telemetry, metrics_)
    return ProxyState(
        settings=settings,
        telemetry=telemetry,
        contexts=ContextStore(settings.context_root, telemetry),
        ledger=Ledger(settings.history_root, fsync=settings.ledger_fsync),
        redactor=Redactor.from_file(settings.redaction_rules),
        rate_limiter=RateLimiter(settings.rate_limit_per_agent, settings.rate_limit_burst),
        upstream_slots=AgentShares(settings.max_concurrent_upstream, settings.max_concurrent_upstream_per_agent),
        passthrough=parse_allow_list(settings.passthrough),
        metrics=metrics_,
    )


def watch(state: ProxyState) -> None:
    """What listens to every memory op besides the metrics: the inspector's recall history, and
    traces (when OTEL_* asks for them)."""
    state.telemetry.observers.append(state.recall_history.observe)
    state.tracing = Tracing.from_env(state.redactor, telemetry=state.telemetry)
    if state.tracing.enabled:
        state.telemetry.observers.append(state.tracing.memory_op)


def build_app(settings: ProxySettings, telemetry: Telemetry | None = None) -> web.Application:
    quiet_header_values()  # a refused Authorization header is logged without its value
    state = build_state(settings, telemetry)
    watch(state)
    app = web.Application(middlewares=[errors_middleware], client_max_size=settings.max_body_bytes)
    app[STATE] = state

    async def start(app: web.Application) -> None:
        connector = aiohttp.TCPConnector(limit=0, limit_per_host=0, ttl_dns_cache=300, enable_cleanup_closed=True)
        # no cookie jar: the one session serves every agent, and a cookie one agent's answer set
        # (a provider's load-balancer cookie) must not ride along on another agent's calls
        state.session = aiohttp.ClientSession(connector=connector, auto_decompress=True,
                                              cookie_jar=aiohttp.DummyCookieJar())
        if settings.ledger == "redis":
            from .scale.wiring import stream_delivery

            state.retain = stream_delivery(state, settings)
        else:
            state.retain = RetainDelivery(state.session, state.telemetry, state.redactor, state.ledger,
                                          state.contexts, max_buffered=settings.retain_queue_size,
                                          batch=settings.retain_batch, batch_call=settings.retain_batch_call,
                                          linger_s=settings.retain_linger_s,
                                          max_in_flight=settings.retain_max_in_flight)
        await state.retain.start()
        state.metrics.watch_backlog(state.retain.backlog)

    async def stop(app: web.Application) -> None:
        if state.retain is not None:
            await state.retain.close(min(5.0, settings.shutdown_grace_s))
        if state.session is not None:
            await state.session.close()
        state.ledger.close()
        if state.tracing.enabled:
            await asyncio.to_thread(state.tracing.shutdown)  # the spans still queued go out

    app.on_startup.append(start)
    app.on_cleanup.append(stop)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/memplane/turns/{turn_id}", explain_turn)
    add_ui_routes(app, STATE)
    add_mcp_routes(app, state)  # memory as MCP tools at /mcp
    for fmt in FORMATS:
        app.router.add_post(fmt.route, _turn_route(fmt))
    app.router.add_route("*", "/v1/{tail:.*}", passthrough)
    return app
