"""The inspector page (`/memplane/ui/`): server-rendered HTML (Jinja2, autoescaped), for the admin.

Agents with their last recall and retain backlog, an agent's recent turns (each opening its
explanation) and its memories in the service when the service offers the REST listing (list,
search, filters, cursor pages). A memory's own page edits its text, importance and TTL, pins it,
and forgets it with a reason; the memory service keeps the audit trail of every change and the
page shows it (curate.py talks to the service). Forget does what `memplane memory forget` does:
a local tombstone and the service's forget for memories made from turns (entry ids must be in
the agent's ledger); a REST delete for memories written directly.

Pages are for the operator's browser, which also visits hostile sites: every form carries a
CSRF token, state-changing posts from another site are refused, pages cannot be framed or
cached, and errors are pages too (DESIGN.md, "Local defaults").
"""

from __future__ import annotations

import asyncio
import math
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import web
from jinja2 import Environment, PackageLoader, select_autoescape

from ..memory_service import MemoryService, MemoryServiceError
from ..retain.files import dead_letter_path
from ..transport_errors import read_request_form
from .admin import COOKIE, COOKIE_PATH, CSRF_COOKIE, Operator, OperatorGate, OperatorRefused, install
from . import charts
from .curate import (KINDS, SCOPES, CurateError, audit_view, conversation, find_entry, id_html, memory_stats,
                     operator_name, view)
from .explain import explanation
from .memory_ops import remote_forget

_env = Environment(loader=PackageLoader("proxy.operator", "templates"), autoescape=select_autoescape(["html"]))
_env.filters["id"] = id_html  # a long id shown short, whole in its tooltip
_env.filters["utc"] = lambda at: datetime.fromtimestamp(at, timezone.utc).strftime("%H:%M")
_env.filters["ts"] = lambda ts: str(ts or "").replace("T", " ")[:19]  # RFC 3339 (UTC) to the second

RECENT_HOURS = 6  # the recall charts' window
SLICES = 24  # its bars (15 minutes each)
STATS_PAGES, STATS_PAGE_SIZE = 4, 500  # the memory charts read at most 2,000 memories of an agent


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


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class _Inspector:
    """What the inspector's handlers need besides the request: where the proxy's state is, and the gate."""

    state_key: web.AppKey
    gate: OperatorGate


INSPECTOR = web.AppKey("memplane_inspector", _Inspector)


def _state(request: web.Request) -> Any:
    return request.app[request.app[INSPECTOR].state_key]


def _gate(request: web.Request) -> OperatorGate:
    return request.app[INSPECTOR].gate


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
    state = _state(request)
    operator = _gate(request).identify(request)
    if operator is None:
        if state.settings.admin_token:
            raise web.HTTPSeeOther("/memplane/ui/login")
        raise PageError(403, "The inspector answers only on loopback unless MEMPLANE_ADMIN_TOKEN is set.")
    return state, operator


def csrf(request: web.Request, operator: Operator | None) -> str:
    """The token this page's forms carry (bound to the session, else to this browser's cookie)."""
    binding = _gate(request).csrf_binding(request, operator)
    if binding is None:
        if NEW_CSRF_COOKIE not in request:
            request[NEW_CSRF_COOKIE] = secrets.token_urlsafe(32)
        binding = "browser:" + request[NEW_CSRF_COOKIE]
    return _gate(request).csrf_token(binding)


def render(request: web.Request, operator: Operator | None, name: str, **context: Any) -> web.Response:
    return _page(name, csrf=csrf(request, operator), session=bool(operator and operator.session_id),
                 **context)


async def checked_form(request: web.Request, operator: Operator | None) -> Any:
    """A state-changing post: same origin, then its CSRF token."""
    _gate(request).same_origin(request)
    form = await read_request_form(request)
    _gate(request).check_csrf(request, operator, str(form.get("csrf", "")))
    return form


def no_login_needed(request: web.Request) -> None:
    """Without an admin token there is nothing to log in with: on to the pages (Host-checked)."""
    if not _state(request).settings.admin_token:
        guard(request)
        raise web.HTTPSeeOther("/memplane/ui/")


async def login_form(request: web.Request) -> web.Response:
    no_login_needed(request)
    return render(request, None, "login.html", error=None)


async def login(request: web.Request) -> web.Response:
    no_login_needed(request)
    form = await checked_form(request, None)
    sid = _gate(request).login(request, str(form.get("token", "")))
    if sid is None:
        return render(request, None, "login.html", error="That is not the admin token.")
    resp = web.HTTPSeeOther("/memplane/ui/")
    resp.set_cookie(COOKIE, sid, httponly=True, samesite="Strict", path=COOKIE_PATH,
                    max_age=int(_gate(request).sessions.ttl_s))
    raise resp


async def logout(request: web.Request) -> web.Response:
    _, operator = guard(request)
    await checked_form(request, operator)
    _gate(request).logout(request, operator)
    resp = web.HTTPSeeOther("/memplane/ui/login" if _state(request).settings.admin_token
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
        dead = dead_letter_path(state.ledger.root, agent_id)
        rows.append({
            "id": agent_id, "turns_today": sum(1 for t in recent if t["ts"].startswith(today)),
            "last_status": last["recall"]["status"] if last else None,
            "last_latency": round(last["recall"]["latency_ms"], 1) if last else None,
            "backlog": int(state.retain.backlog(agent_id)) if state.retain else 0,
            "dead": len(dead.read_bytes().splitlines()) if dead.exists() else 0,
            "turns": len(recent), "last_ts": last["ts"] if last else None})
    history = state.recall_history
    for row in rows:
        row["spark"] = charts.sparkline(history.buckets(row["id"], hours=RECENT_HOURS, slices=SLICES),
                                        f"Recall of {row['id']}, last {RECENT_HOURS} hours")
    every = history.buckets(None, hours=RECENT_HOURS, slices=SLICES)
    return render(request, operator, "agents.html", agents=rows, hours=RECENT_HOURS, buckets=every,
                  status_chart=charts.recall_status(every, RECENT_HOURS),
                  latency_chart=charts.recall_latency(every, RECENT_HOURS))


def service_of(state: Any, agent_id: str) -> MemoryService:
    ctx = state.contexts.get(agent_id)
    if ctx is None:
        raise PageError(404, "No such agent.")
    if ctx.memory is None:
        raise PageError(404, "This agent has no memory service.")
    return MemoryService.of(state.session, ctx.memory, agent_id, ctx.metadata.pod)


async def agent(request: web.Request) -> web.Response:
    state, operator = guard(request)
    agent_id = request.match_info["agent"]
    ctx = state.contexts.get(agent_id)
    if ctx is None:
        raise PageError(404, "No such agent.")
    query = request.query
    filters = {"q": query.get("q", "").strip()[:500], "kind": query.get("kind", ""),
               "scope": query.get("scope", ""), "since": query.get("since", "").strip()[:40],
               "until": query.get("until", "").strip()[:40]}
    found: list[dict] = []
    error = next_cursor = None
    if ctx.memory is None:
        error = "This agent has no memory service."
    else:
        client = service_of(state, agent_id)
        try:
            if filters["q"]:
                found = await client.search(filters["q"], kind=filters["kind"] or None)
                found = [m for m in found if not filters["scope"] or m.get("scope") == filters["scope"]]
            else:
                found, next_cursor = await client.listing(
                    kind=filters["kind"] or None, scope=filters["scope"] or None, since=filters["since"] or None,
                    until=filters["until"] or None, cursor=query.get("cursor") or None)
        except (CurateError, KeyError, TypeError) as exc:
            error = str(exc) if isinstance(exc, CurateError) else "The memory service answered in an unknown shape."
    more = urlencode({**{k: v for k, v in filters.items() if v}, "cursor": next_cursor}) if next_cursor else None
    overview = await _overview(state, agent_id) if ctx.memory is not None else {}
    buckets = state.recall_history.buckets(agent_id, hours=RECENT_HOURS, slices=SLICES)
    return render(request, operator, "agent.html", agent=agent_id, hours=RECENT_HOURS, buckets=buckets,
                  status_chart=charts.recall_status(buckets, RECENT_HOURS),
                  latency_chart=charts.recall_latency(buckets, RECENT_HOURS), **overview,
                  backlog=int(state.retain.backlog(agent_id)) if state.retain else 0,
                  turns=state.explanations.recent(agent_id, limit=50),
                  memories=[view(m) for m in found], memories_error=error, f=filters, kinds=KINDS,
                  scopes=SCOPES, more=more, notice=request.query.get("notice"),
                  service=ctx.memory.service if ctx.memory else None)


async def _overview(state: Any, agent_id: str) -> dict[str, Any]:
    """The agent page's picture of its memory: counts by kind and over time, the curator's work,
    the latest changes. A service that cannot answer costs the charts, not the page."""
    client = service_of(state, agent_id)
    found: list[dict] = []
    out: dict[str, Any] = {"stats_error": None, "stats_capped": False, "changes": [], "changes_error": None}
    try:
        cursor = None
        for _ in range(STATS_PAGES):
            page, cursor = await client.listing(cursor=cursor, limit=STATS_PAGE_SIZE)
            found += page
            if not cursor:
                break
        out["stats_capped"] = bool(cursor)
    except (CurateError, KeyError, TypeError) as exc:
        out["stats_error"] = str(exc) if isinstance(exc, CurateError) else "The memory service answered in an unknown shape."
    if out["stats_error"] is None:  # a page of zeros would say "no memories", which nobody knows
        stats = memory_stats(found)
        out.update(stats=stats, kinds_chart=charts.memories_by_kind(stats["by_kind"]),
                   growth_chart=charts.memories_over_time(stats["created"]))
    try:
        out["changes"] = [audit_view(e) for e in (await client.audit())[:8]]
    except (CurateError, KeyError, TypeError) as exc:
        out["changes_error"] = str(exc) if isinstance(exc, CurateError) else "The memory service answered in an unknown shape."
    return out


async def memory(request: web.Request) -> web.Response:
    state, operator = guard(request)
    agent_id, memory_id = request.match_info["agent"], request.match_info["memory_id"]
    client = service_of(state, agent_id)
    try:
        m = await client.get(memory_id)
        if m is None:
            raise PageError(404, "No such memory (it may have been forgotten or expired).")
        trail = await client.audit(memory_id)
    except CurateError as exc:
        raise PageError(502, str(exc)) from None
    return render(request, operator, "memory.html", agent=agent_id, m=view(m),
                  audit=[audit_view(e) for e in trail], notice=request.query.get("notice"))


async def change(request: web.Request) -> web.Response:
    """Edit (text, importance, TTL) or pin/unpin a memory; the service records the change."""
    state, operator = guard(request)
    agent_id, memory_id = request.match_info["agent"], request.match_info["memory_id"]
    client = service_of(state, agent_id)
    form = await checked_form(request, operator)
    changes: dict[str, Any] = {"actor": operator_name(operator)}
    if reason := str(form.get("reason", "")).strip()[:1000]:
        changes["reason"] = reason
    if "pinned" in form:
        changes["pinned"] = form.get("pinned") == "true"
    else:
        if "value" in form:
            changes["value"] = str(form["value"]).replace("\r\n", "\n")
        if "importance" in form:
            try:
                changes["importance"] = float(str(form["importance"]))
            except ValueError:
                changes["importance"] = math.nan
            if not math.isfinite(changes["importance"]):  # JSON has no NaN: it would go as null, "saved"
                raise PageError(400, "Importance must be a number from 0 to 1.")
        ttl = str(form.get("ttl", "")).strip()
        if form.get("permanent") == "on":
            changes["ttl"] = None
        elif ttl.isdigit():  # also "²" and 5,000 digits, which int() refuses
            try:
                changes["ttl"] = int(ttl)
            except ValueError:
                raise PageError(400, "TTL must be seconds or an RFC 3339 time.") from None
        elif ttl:
            changes["ttl"] = ttl
    try:
        if await client.get(memory_id) is None:  # another agent's memory is not edited from this page
            raise PageError(404, "No such memory for this agent.")
        await client.edit(memory_id, changes)
    except CurateError as exc:
        raise PageError(400, str(exc)) from None
    done = ("Pinned." if changes.get("pinned") else "Unpinned.") if "pinned" in changes else "Saved."
    raise web.HTTPSeeOther(f"/memplane/ui/agents/{quote(agent_id, safe='')}/memories/"
                           f"{quote(memory_id, safe='')}?" + urlencode({"notice": done}))


async def audit_page(request: web.Request) -> web.Response:
    state, operator = guard(request)
    agent_id = request.match_info["agent"]
    try:
        trail = await service_of(state, agent_id).audit()
    except CurateError as exc:
        raise PageError(502, str(exc)) from None
    return render(request, operator, "audit.html", agent=agent_id, audit=[audit_view(e) for e in trail])


async def entry(request: web.Request) -> web.Response:
    """A memory's source: the ledger entry's conversation, and its turn's explanation when kept."""
    state, operator = guard(request)
    agent_id, entry_id = request.match_info["agent"], request.match_info["entry_id"]
    if state.contexts.get(agent_id) is None:
        raise PageError(404, "No such agent.")
    found = await asyncio.to_thread(find_entry, state.ledger, agent_id, entry_id)
    if found is None:
        raise PageError(404, f"Not in {agent_id}'s ledger (it may come from an import).")
    turn_id = found.get("turn_id")
    if isinstance(turn_id, str) and state.explanations.get(turn_id) is not None:
        raise web.HTTPSeeOther(f"/memplane/ui/turns/{quote(turn_id, safe='')}")
    return render(request, operator, "entry.html", agent=agent_id, c=conversation(found))


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
    reason = str(form.get("reason", "")).strip()[:1000] or "forgotten in the inspector"
    memory_id = str(form.get("memory_id", ""))
    entry_ids = [str(e) for e in form.getall("entry_id", [])]
    if len(entry_ids) > MAX_FORGET_ENTRY_IDS:
        raise PageError(400, f"At most {MAX_FORGET_ENTRY_IDS} entry ids per forget.")
    if entry_ids and (unknown := await unknown_entries(state, agent_id, entry_ids)):
        shown = ", ".join(unknown[:5]) + (" …" if len(unknown) > 5 else "")
        raise PageError(400, f"Not in {agent_id}'s ledger, nothing was forgotten: {shown}")
    manifest = ctx.memory
    notice = "Forgotten."
    if memory_id:  # first, so that the service's audit trail records who forgot it and why
        try:
            await service_of(state, agent_id).delete(memory_id, reason, operator_name(operator))
        except MemoryServiceError as exc:
            notice = str(exc)
    if entry_ids:  # the turns behind it: tombstoned here and forgotten by the service
        state.ledger.add_tombstones(agent_id, entry_ids, reason)
        result = await remote_forget(state.session, state.telemetry, manifest, agent_id, ctx.metadata.pod,
                                     entry_ids, reason, via="inspector")
        if result != "ok":
            notice = f"Tombstoned here; the memory service did not confirm ({result})."
    raise web.HTTPSeeOther(f"/memplane/ui/agents/{agent_id}?" + urlencode({"notice": notice}))


async def turn(request: web.Request) -> web.Response:
    state, operator = guard(request)
    doc = explanation(state, request.match_info["turn_id"])
    if doc is None:
        raise PageError(404, "No such turn (explanations are kept for the most recent turns).")
    said = None
    if doc.get("entry_id"):
        found = await asyncio.to_thread(find_entry, state.ledger, doc["agent_id"], doc["entry_id"])
        said = conversation(found) if found is not None else None
    return render(request, operator, "turn.html", t=doc, retain_state=doc.get("retain_state"), said=said)


async def to_the_agents(request: web.Request) -> web.Response:
    raise web.HTTPMovedPermanently("/memplane/ui/")


async def not_found(request: web.Request) -> web.Response:
    guard(request)
    raise PageError(404, "No such inspector page.")


ROUTES: list[tuple[str, str, Handler]] = [  # method, path, handler (GET also answers HEAD)
    ("GET", "/memplane/ui/login", login_form),
    ("POST", "/memplane/ui/login", login),
    ("POST", "/memplane/ui/logout", logout),
    ("GET", "/memplane/ui", to_the_agents),
    ("GET", "/memplane/ui/", agents),
    ("GET", "/memplane/ui/agents/{agent}", agent),
    ("POST", "/memplane/ui/agents/{agent}/forget", forget),
    ("GET", "/memplane/ui/agents/{agent}/audit", audit_page),
    ("GET", "/memplane/ui/agents/{agent}/memories/{memory_id}", memory),
    ("POST", "/memplane/ui/agents/{agent}/memories/{memory_id}", change),
    ("GET", "/memplane/ui/agents/{agent}/entries/{entry_id}", entry),
    ("GET", "/memplane/ui/turns/{turn_id}", turn),
    ("*", "/memplane/ui/{tail:.*}", not_found),
]


def add_ui_routes(app: web.Application, state_key: web.AppKey) -> None:
    """The inspector's routes; also installs the operator gate the JSON operator routes use."""
    state = app[state_key]
    app[INSPECTOR] = _Inspector(state_key, install(app, state.settings, state.telemetry))
    app.on_response_prepare.append(_page_headers)
    for method, path, handler in ROUTES:
        if method == "GET":
            app.router.add_get(path, page(handler))
        else:
            app.router.add_route(method, path, page(handler))


