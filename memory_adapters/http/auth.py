"""Who is calling: the service token (the admin) or a per-agent token, which may only name its
own agent. `/health` and the descriptor answer without a token."""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass

from aiohttp import web

from .errors import json_error

OPEN_PATHS = frozenset({"/health", "/.claw-describe.json"})
# The agent a per-agent token authenticated; absent for the admin token.
CALLER_AGENT = web.RequestKey("caller_agent", str)
# What a per-agent token was granted beyond its own agent ("global": write shared memories).
CALLER_GRANTS = web.RequestKey("caller_grants", frozenset)


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
        for agent_id, agent_token in agent_tokens.items():
            if given and hmac.compare_digest(given.encode(), agent_token.token.encode()):
                request[CALLER_AGENT] = agent_id
                request[CALLER_GRANTS] = agent_token.grants
                return await handler(request)
        return json_error(401, "missing or invalid bearer token")

    return middleware
