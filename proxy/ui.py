"""The inspector page (`/memplane/ui/`): server-rendered HTML (Jinja2, autoescaped), for the admin.

Agents with their last recall and retain backlog, an agent's recent turns (each opening its
explanation) and its memories in the service when the service offers the REST listing (list,
search, forget). Forget does what `memplane memory forget` does: a local tombstone and the
service's forget for memories made from turns; a REST delete for memories written directly.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urlencode

import aiohttp
from aiohttp import web
from jinja2 import Environment, PackageLoader, select_autoescape

from .admin import COOKIE, is_admin, session_value, token_matches
from .explain import explanation
from .ledger import append_tombstones
from .memory_ops import remote_forget
from .retain_files import dead_letter_path
from .transport_errors import TransportError, transport_errors

_env = Environment(loader=PackageLoader("proxy", "templates"), autoescape=select_autoescape(["html"]))


def _page(name: str, **context: Any) -> web.Response:
    return web.Response(text=_env.get_template(name).render(**context), content_type="text/html")


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
    def guard(request: web.Request) -> Any:
        state = request.app[state_key]
        if not is_admin(request, state.settings):
            if state.settings.admin_token:
                raise web.HTTPSeeOther("/memplane/ui/login")
            raise web.HTTPForbidden(text="The inspector answers only on loopback unless MEMPLANE_ADMIN_TOKEN is set.")
        return state

    async def login_form(request: web.Request) -> web.Response:
        return _page("login.html", error=None)

    async def login(request: web.Request) -> web.Response:
        state = request.app[state_key]
        form = await request.post()
        token = str(form.get("token", ""))
        if not state.settings.admin_token or not token_matches(token, state.settings.admin_token):
            return _page("login.html", error="That is not the admin token.")
        resp = web.HTTPSeeOther("/memplane/ui/")
        resp.set_cookie(COOKIE, session_value(state.settings.admin_token), httponly=True, samesite="Strict",
                        path="/memplane/")
        raise resp

    async def agents(request: web.Request) -> web.Response:
        state = guard(request)
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
        return _page("agents.html", agents=rows, chart=_chart(points))

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
        state = guard(request)
        agent_id = request.match_info["agent"]
        ctx = state.contexts.get(agent_id)
        if ctx is None:
            raise web.HTTPNotFound(text="No such agent.")
        q = request.query.get("q", "").strip()
        found, error = await memories(state, ctx, agent_id, q)
        return _page("agent.html", agent=agent_id, turns=state.explanations.recent(agent_id, limit=50),
                     memories=found, memories_error=error, q=q, notice=request.query.get("notice"),
                     service=ctx.memory.service if ctx.memory else None)

    async def forget(request: web.Request) -> web.Response:
        state = guard(request)
        agent_id = request.match_info["agent"]
        ctx = state.contexts.get(agent_id)
        if ctx is None or ctx.memory is None:
            raise web.HTTPNotFound(text="No such agent or no memory service.")
        form = await request.post()
        memory_id = str(form.get("memory_id", ""))
        entry_ids = [str(e) for e in form.getall("entry_id", [])]
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
        state = guard(request)
        doc = explanation(state, request.match_info["turn_id"])
        if doc is None:
            raise web.HTTPNotFound(text="No such turn (explanations are kept for the most recent turns).")
        return _page("turn.html", t=doc, retain_state=doc.get("retain_state"))

    app.router.add_get("/memplane/ui/login", login_form)
    app.router.add_post("/memplane/ui/login", login)
    app.router.add_get("/memplane/ui/", agents)
    app.router.add_get("/memplane/ui/agents/{agent}", agent)
    app.router.add_post("/memplane/ui/agents/{agent}/forget", forget)
    app.router.add_get("/memplane/ui/turns/{turn_id}", turn)


