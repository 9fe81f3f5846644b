"""The read step: who is calling, and the request memplane works on (its thread expanded, checked)."""

from __future__ import annotations

from typing import Any

import orjson
from aiohttp import web

from ..context_store import AgentContext
from ..errors import ProxyError
from ..explanation import new_turn_id
from ..forward_policy import require_model_allowed
from ..ledger.entry import nests_safely
from ..rate_limit import retry_after_header
from ..state import ProxyState
from ..transport_errors import read_request_body
from ..upstream import agent_token, check_credentials
from .value import Turn


async def read(turn: Turn) -> None:
    """Authenticate, read the body, expand a thread memplane holds, validate; name the turn."""
    state = turn.state
    turn.ctx = await authenticate(turn.request, state)
    turn.original = turn.body = await read_json_body(turn.request)
    state.response_owners.check(turn.agent_id, turn.original)  # no agent continues another agent's conversation
    if turn.fmt.provider == "anthropic" and turn.recalls:
        await state.threads.prefetch(turn.agent_id, turn.original)  # (another proxy's thread, with --ledger redis)
        turn.body, turn.thread = state.threads.expand(turn.agent_id, turn.original)  # memplane holds the threads
    turn.fmt.validate(turn.body)
    require_model_allowed(turn.ctx.metadata.allowed_models, turn.body.get("model"))
    turn.session_id = session_id_of(turn.request, turn.body)
    turn.turn_id = new_turn_id()
    state.tracing.agent(turn.agent_id, turn.turn_id)
    turn.effective = turn.body


async def authenticate(request: web.Request, state: ProxyState) -> AgentContext:
    ctx = state.contexts.authenticate(agent_token(request.headers))
    if ctx is None:
        raise ProxyError(401, "Invalid or missing agent token. Use '<agent-id>:<secret>' as the API key "
                              "(or, for an agent that brings its own provider key, in X-Memplane-Agent).",
                         code="invalid_api_key")
    check_credentials(ctx.metadata.client_provider_key, request.headers,
                      lambda value: state.contexts.authenticate(value) is not None)
    wait = await state.rate_limiter.check(ctx.agent_id)
    if wait > 0:
        raise ProxyError(429, "Rate limit exceeded for this agent; retry later.", code="rate_limit_exceeded",
                         headers={"Retry-After": retry_after_header(wait)})
    return ctx


async def read_json_body(request: web.Request) -> dict[str, Any]:
    raw = await read_request_body(request)
    if not raw.strip():
        raise ProxyError(400, "The request body is empty; expected a JSON object.", code="invalid_json")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ProxyError(400, f"The request body is not valid JSON: {exc.msg}.", code="invalid_json") from None
    if not isinstance(body, dict):
        raise ProxyError(400, "The request body must be a JSON object.", code="invalid_json")
    if not nests_safely(body):
        raise ProxyError(400, "The request body is nested too deeply to be forwarded and recorded.")
    return body


def session_id_of(request: web.Request, body: dict[str, Any]) -> str | None:
    sid = request.headers.get("X-Session-Id")
    if not sid and isinstance(body.get("metadata"), dict):
        value = body["metadata"].get("session_id")
        sid = value if isinstance(value, str) else None
    return sid
