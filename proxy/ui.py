"""The inspector page (`/memplane/ui/`): server-rendered HTML (Jinja2, autoescaped), for the admin.

Agents with their last recall and retain backlog, an agent's recent turns (each opening its
explanation) and its memories in the service when the service offers the REST listing (list,
search, forget). Forget does what `memplane memory forget` does: a local tombstone and the
service's forget for memories made from turns (entry ids must be in the agent's ledger); a REST
delete for memories written directly.

Pages are for the operator's browser, which also visits hostile sites: every form carries a
CSRF token, state-changing posts from another site are refused, pages cannot be framed or
cached, and errors are pages too (DESIGN.md, "Local defaults").
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Awaitable, Callable
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
from aiohttp import web
from jinja2 import Environment, PackageLoader, select_autoescape

from .admin import COOKIE, COOKIE_PATH, CSRF_COOKIE, Operator, OperatorGate, OperatorRefused, install
from .explain import explanation
from .ledger import append_tombstones
from .memory_ops import remote_forget
from .retain_files import dead_letter_path
from .transport_errors import TransportError, transport_errors

_env = Environment(loader=PackageLoader("proxy", "templates"), autoescape=select_autoescape(["html"]))


MAX_FORGET_ENTRY_IDS = 1_000  # what one memory can name (StoreBody.source_entry_ids)
# Inspector responses: never framed (clickjacking a Forget button), never cached (memories, turns)
PAGE_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; "
                               "form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
    "Cache-Control": "no-store",
    "Referrer-Policy": "same-origin",  # no-referrer would make forms send `Origin: null`
    "X-Content-Type-Options": "nosniff",
}


# a CSRF cookie minted while rendering this response (set on it by `page`)
NEW_CSRF_COOKIE = web.RequestKey("memplane_new_csrf_cookie", str)


class PageError(Exception):
    """An inspector error shown as a page (a JSON error body is for API clients, not people)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def _page(name: str, *, status: int = 200, **context: Any) -> web.Response:
    return web.Response(status=status, text=_env.get_template(name).render(**context), content_type="text/html")


async def _page_headers(request: web.Request, response: web.StreamResponse) -> None:
    if request.path.startswith("/memplane/"):
        response.headers.update(PAGE_HEADERS)


def _chart(points: list[tuple[float, float, float]]) -> str:
    """A small inline SVG: recall latency (ms) and injected tokens per turn over the last hour."""
    if not points:
        return "<p>No turns in the last hour.</p>"
    w, h = 600, 120
    lat_max = max(p[1] for p in points) or 1.0
    tok_max = max(p[2] for p in points) or 1.0
    step = w / max(1, len(points) - 1)

    def line(values: list[float], top: float) -> str:
        return " ".join(f"{i * step:.1f},{h - v / top * (h - 10):.1f}" for i, v in enumerate(values))

    return (f'<svg id="chart" width="{w}" height="{h}" role="img" aria-label="recall latency and injected tokens">'
            f'<polyline fill="none" stroke="#c33" points="{line([p[1] for p in points], lat_max)}"/>'
            f'<polyline fill="none" stroke="#36c" points="{line([p[2] for p in points], tok_max)}"/>'
            f'<text x="4" y="12" fill="#c33">latency ≤ {lat_max:.0f} ms</text>'
            f'<text x="200" y="12" fill="#36c">tokens ≤ {tok_max:.0f}</text></svg>')


def add_ui_routes(app: web.Application, state_key: web.AppKey) -> None:
    """The inspector's routes; also installs the operator gate the JSON operator routes use."""
    state0 = app[state_key]
    gate: OperatorGate = install(app, state0.settings, state0.telemetry)
    app.on_response_prepare.append(_page_headers)
    Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

    def page(handler: Handler) -> Handler:
        """Errors as HTML pages; a CSRF cookie for browsers that have none yet."""
        async def wrapped(request: web.Request) -> web.StreamResponse:
            try:
                response = await handler(request)
            except (OperatorRefused, PageError) as exc:
                response = _page("error.html", status=exc.status, message=exc.message)
                response.headers.update(exc.headers)
            if CSRF_COOKIE not in request.cookies and NEW_CSRF_COOKIE in request:
                response.set_cookie(CSRF_COOKIE, request[NEW_CSRF_COOKIE], httponly=True, samesite="Strict",
                                    path=COOKIE_PATH)
            return response
        return wrapped

    def guard(request: web.Request) -> tuple[Any, Operator]:
        state = request.app[state_key]
        operator = gate.identify(request)
        if operator is None:
            if state.settings.admin_token:
                raise web.HTTPSeeOther("/memplane/ui/login")
            raise PageError(403, "The inspector answers only on loopback unless MEMPLANE_ADMIN_TOKEN is set.")
        return state, operator

    def csrf(request: web.Request, operator: Operator | None) -> str:
        """The token this page's forms carry (bound to the session, else to this browser's cookie)."""
        binding = gate.csrf_binding(request, operator)
        if binding is None:
            if NEW_CSRF_COOKIE not in request:
                request[NEW_CSRF_COOKIE] = secrets.token_urlsafe(32)
            binding = "browser:" + request[NEW_CSRF_COOKIE]
        return gate.csrf_token(binding)

    def render(request: web.Request, operator: Operator | None, name: str, **context: Any) -> web.Response:
        return _page(name, csrf=csrf(request, operator), session=bool(operator and operator.session_id),
                     **context)

    async def checked_form(request: web.Request, operator: Operator | None) -> Any:
        """A state-changing post: same origin, then its CSRF token."""
        gate.same_origin(request)
        form = await request.post()
        gate.check_csrf(request, operator, str(form.get("csrf", "")))
        return form

    def no_login_needed(request: web.Request) -> None:
        """Without an admin token there is nothing to log in with: on to the pages (Host-checked)."""
        if not request.app[state_key].settings.admin_token:
            guard(request)
            raise web.HTTPSeeOther("/memplane/ui/")

    async def login_form(request: web.Request) -> web.Response:
        no_login_needed(request)
        return render(request, None, "login.html", error=None)

    async def login(request: web.Request) -> web.Response:
        no_login_needed(request)
        form = await checked_form(request, None)
        sid = gate.login(request, str(form.get("token", "")))
        if sid is None:
            return render(request, None, "login.html", error="That is not the admin token.")
        resp = web.HTTPSeeOther("/memplane/ui/")
        resp.set_cookie(COOKIE, sid, httponly=True, samesite="Strict", path=COOKIE_PATH,
                        max_age=int(gate.sessions.ttl_s))
        raise resp

    async def logout(request: web.Request) -> web.Response:
        _, operator = guard(request)
        await checked_form(request, operator)
        gate.logout(request, operator)
        resp = web.HTTPSeeOther("/memplane/ui/login" if request.app[state_key].settings.admin_token
                                else "/memplane/ui/")
        resp.del_cookie(COOKIE, path=COOKIE_PATH)
        raise resp

    async def agents(request: web.Request) -> web.Response:
        state, operator = guard(request)
        today = datetime.now(timezone.utc).strftime("%Y-%m-%d")
        rows = []
        for agent_id in state.contexts.agent_ids():
            recent = state.explanations.recent(agent_id, limit=5000)
            last = recent[0] if recent else None
            lane = state.retain.lanes.get(agent_id) if state.retain else None
            dead = dead_letter_path(state.ledger.root, agent_id)
            rows.append({
                "id": agent_id, "turns_today": sum(1 for t in recent if t["ts"].startswith(today)),
                "last_status": last["recall"]["status"] if last else None,
                "last_latency": round(last["recall"]["latency_ms"], 1) if last else None,
                "backlog": len(lane.pending) if lane else 0,
                "dead": len(dead.read_bytes().splitlines()) if dead.exists() else 0})
        hour_ago = time.time() - 3600
        points = [(t["_at"], t["recall"]["latency_ms"], float(t.get("tokens", 0)))
                  for t in reversed(state.explanations.recent(limit=500)) if t.get("_at", 0) >= hour_ago]
        return render(request, operator, "agents.html", agents=rows, chart=_chart(points))

    async def memories(state, ctx, agent_id: str, q: str) -> tuple[list[dict], str | None]:
        manifest = ctx.memory if ctx else None
        if manifest is None:
            return [], "This agent has no memory service."
        base = manifest.base_url
        try:
            if q:
                async with state.session.post(f"{base}/api/memories/search", headers=manifest.headers(),
                                              json={"agent_id": agent_id, "query": q, "top_k": 50},
                                              timeout=aiohttp.ClientTimeout(total=5)) as r:
                    if r.status != 200:
                        return [], f"The service does not offer search (status {r.status})."
                    return (await r.json())["results"], None
            async with state.session.get(f"{base}/api/memories", headers=manifest.headers(),
                                         params={"agent_id": agent_id, "limit": "200"},
                                         timeout=aiohttp.ClientTimeout(total=5)) as r:
                if r.status != 200:
                    return [], f"The service does not offer the REST listing (status {r.status})."
                return (await r.json())["memories"], None
        except (aiohttp.ClientError, TimeoutError, KeyError, ValueError) as exc:
            return [], f"The memory service did not answer ({type(exc).__name__})."

    async def agent(request: web.Request) -> web.Response:
        state, operator = guard(request)
        agent_id = request.match_info["agent"]
        ctx = state.contexts.get(agent_id)
        if ctx is None:
            raise PageError(404, "No such agent.")
        q = request.query.get("q", "").strip()
        found, error = await memories(state, ctx, agent_id, q)
        return render(request, operator, "agent.html", agent=agent_id,
                      turns=state.explanations.recent(agent_id, limit=50),
                     memories=found, memories_error=error, q=q, notice=request.query.get("notice"),
                     service=ctx.memory.service if ctx.memory else None)

    async def unknown_entries(state: Any, agent_id: str, entry_ids: list[str]) -> list[str]:
        def scan() -> list[str]:
            wanted = set(entry_ids)
            for ref in state.ledger.read(agent_id):
                wanted.discard(ref.entry.get("id"))
                if not wanted:
                    break
            return sorted(wanted)
        return await asyncio.to_thread(scan)

    async def forget(request: web.Request) -> web.Response:
        state, operator = guard(request)
        agent_id = request.match_info["agent"]
        ctx = state.contexts.get(agent_id)
        if ctx is None or ctx.memory is None:
            raise PageError(404, "No such agent or no memory service.")
        form = await checked_form(request, operator)
        memory_id = str(form.get("memory_id", ""))
        entry_ids = [str(e) for e in form.getall("entry_id", [])]
        if len(entry_ids) > MAX_FORGET_ENTRY_IDS:
            raise PageError(400, f"At most {MAX_FORGET_ENTRY_IDS} entry ids per forget.")
        if entry_ids and (unknown := await unknown_entries(state, agent_id, entry_ids)):
            shown = ", ".join(unknown[:5]) + (" …" if len(unknown) > 5 else "")
            raise PageError(400, f"Not in {agent_id}'s ledger, nothing was forgotten: {shown}")
        manifest = ctx.memory
        notice = "Forgotten."
        if entry_ids:
            append_tombstones(state.ledger.root, agent_id, entry_ids, "forgotten in the inspector")
            result = await remote_forget(state.session, state.telemetry, manifest, agent_id, ctx.metadata.pod,
                                         entry_ids, "forgotten in the inspector", via="inspector")
            if result != "ok":
                notice = f"Tombstoned here; the memory service did not confirm ({result})."
        if memory_id:  # memories written through the REST API (and what is left of the turn's)
            try:
                with transport_errors():
                    async with state.session.delete(f"{manifest.base_url}/api/memories/{quote(memory_id, safe='')}",
                                                    headers=manifest.headers(),
                                                    timeout=aiohttp.ClientTimeout(total=5)) as r:
                        await r.read()
                if not 200 <= r.status < 300 and r.status != 404:
                    notice = f"The memory service refused to delete it (status {r.status})."
            except TransportError as exc:
                notice = f"The memory service is unreachable ({exc.name})."
        raise web.HTTPSeeOther(f"/memplane/ui/agents/{agent_id}?" + urlencode({"notice": notice}))

    async def turn(request: web.Request) -> web.Response:
        state, operator = guard(request)
        doc = explanation(state, request.match_info["turn_id"])
        if doc is None:
            raise PageError(404, "No such turn (explanations are kept for the most recent turns).")
        return render(request, operator, "turn.html", t=doc, retain_state=doc.get("retain_state"))

    async def to_the_agents(request: web.Request) -> web.Response:
        raise web.HTTPMovedPermanently("/memplane/ui/")

    async def not_found(request: web.Request) -> web.Response:
        guard(request)
        raise PageError(404, "No such inspector page.")

    app.router.add_get("/memplane/ui/login", page(login_form))
    app.router.add_post("/memplane/ui/login", page(login))
    app.router.add_post("/memplane/ui/logout", page(logout))
    app.router.add_get("/memplane/ui", page(to_the_agents))
    app.router.add_get("/memplane/ui/", page(agents))
    app.router.add_get("/memplane/ui/agents/{agent}", page(agent))
    app.router.add_post("/memplane/ui/agents/{agent}/forget", page(forget))
    app.router.add_get("/memplane/ui/turns/{turn_id}", page(turn))
    app.router.add_route("*", "/memplane/ui/{tail:.*}", page(not_found))


