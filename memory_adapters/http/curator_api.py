"""`GET /curator/usage`: what the curator spent, per agent (the admin sees every agent, an agent
token only its own). Per-agent numbers live here, not in /metrics, where agent ids would be
unbounded label values."""

from __future__ import annotations

from aiohttp import web

from memplane_core.ids import is_agent_id

from ..engine.curator import Curator
from .auth import CALLER_AGENT
from .errors import json_error, json_response

CURATOR = web.AppKey("curator", Curator)  # absent: the curator is off


async def usage(request: web.Request) -> web.Response:
    curator = request.app.get(CURATOR)
    if curator is None:
        return json_error(404, "the curator is off (set MEMPLANE_CURATOR_BASE_URL and MEMPLANE_CURATOR_MODEL, "
                               "or MEMPLANE_CURATOR=deterministic)")
    caller = request.get(CALLER_AGENT)
    agent_id = request.query.get("agent_id") or caller
    if agent_id is not None and not is_agent_id(agent_id):
        return json_error(400, "agent_id: not an agent id", "agent_id")
    if caller is not None and agent_id != caller:
        return json_error(403, "agent_id does not match the token", "agent_id")
    return json_response(curator.usage(agent_id))


ROUTES = [web.get("/curator/usage", usage)]


def add_curator_routes(app: web.Application, curator: Curator | None) -> None:
    if curator is not None:
        app[CURATOR] = curator
    app.add_routes(ROUTES)
