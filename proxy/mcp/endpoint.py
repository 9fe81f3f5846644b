"""`/mcp` on the proxy's port: memory as MCP tools over Streamable HTTP.

The protocol is the `mcp` package's: its low-level `Server` (tools/list, tools/call) behind its
`StreamableHTTPSessionManager`, stateless and answering JSON (each POST stands alone, so no session
can outlive or change hands between agents; both the initialize handshake and the 2026 per-request
era work). aiohttp does what the proxy does for every route before the ASGI side sees the request:

1. a browser's request must come from this server under a loopback name (`Origin` matches `Host`,
   and `Host` is loopback): the DNS-rebinding defence the MCP spec asks for (403);
2. the agent's token `<agent-id>:<secret>` as a bearer, checked like the proxy's (401 with
   `WWW-Authenticate: Bearer`), then the agent's rate limit (429);
3. POST only (405: nothing to stream on a GET, no session to DELETE), its body `application/json` (415).

The authenticated agent travels in the ASGI scope; the tools read it from there, never from the body.
"""

from __future__ import annotations

import asyncio
from typing import Any

import mcp_types as types
from aiohttp import web
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from memplane_core.local_trust import cross_site, is_json_content_type, is_loopback_host

from ..context_store import AgentContext
from ..rate_limit import retry_after_header
from ..state import ProxyState
from ..upstream import agent_token
from .asgi import serve_asgi
from .tools import MemoryTools, tools_for

PATH = "/mcp"
AGENT_KEY = "memplane.agent"  # ASGI scope: the authenticated AgentContext
SESSION_KEY = "memplane.session_id"  # ASGI scope: the client's X-Session-Id, for store_memory's scope session
INSTRUCTIONS = ("memplane memory for this agent: search_memory before answering from what you remember, "
                "store_memory for facts worth keeping, forget_memory (with a reason) for what is wrong or unwanted.")


def _agent(ctx: ServerRequestContext[Any, Any]) -> tuple[AgentContext, str | None]:
    scope = getattr(ctx.request, "scope", None) or {}
    agent = scope.get(AGENT_KEY)
    if not isinstance(agent, AgentContext):  # only the aiohttp route below reaches this server
        raise PermissionError("no authenticated agent")
    return agent, scope.get(SESSION_KEY)


def build_server(state: ProxyState) -> Server[Any]:
    async def list_tools(ctx: ServerRequestContext[Any, Any],
                         params: types.PaginatedRequestParams | None) -> types.ListToolsResult:
        agent, _ = _agent(ctx)
        return types.ListToolsResult(tools=tools_for(agent))

    async def call_tool(ctx: ServerRequestContext[Any, Any],
                        params: types.CallToolRequestParams) -> types.CallToolResult:
        agent, session_id = _agent(ctx)
        return await MemoryTools(state, agent, session_id).call(params.name, params.arguments)

    return Server("memplane-memory", version="1", instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


def _refusal(status: int, message: str, code: int = -32600, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON-RPC error body with the HTTP status that says why (what MCP clients read)."""
    return web.json_response({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}},
                             status=status, headers=headers)


class McpEndpoint:
    """The session manager's lifetime (one asyncio task, so anyio's task group is entered and left
    in the same task) and the aiohttp handler in front of it."""

    def __init__(self, state: ProxyState) -> None:
        self.state = state
        # Origin/Host are checked in `handle` (loopback names, any port); the package's own check
        # takes fixed host:port lists, which a proxy on a free or configured port cannot name up front
        self.manager = StreamableHTTPSessionManager(
            build_server(state), stateless=True, json_response=True,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
            max_request_body_size=1024 * 1024)
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def start(self, app: web.Application) -> None:
        running = asyncio.Event()

        async def run() -> None:
            async with self.manager.run():
                running.set()
                await self._stop.wait()

        self._task = asyncio.create_task(run(), name="mcp-session-manager")
        started = asyncio.create_task(running.wait())
        await asyncio.wait({self._task, started}, return_when=asyncio.FIRST_COMPLETED)
        if not running.is_set():
            started.cancel()
            self._task.result()  # it failed to start: say why

    async def stop(self, app: web.Application) -> None:
        self._stop.set()
        if self._task is not None:
            await self._task

    async def handle(self, request: web.Request) -> web.StreamResponse:
        headers = request.headers
        origin = headers.get("Origin")
        if origin is not None or headers.get("Sec-Fetch-Site") is not None:
            why = cross_site(origin, headers.get("Sec-Fetch-Site"), headers.get("Host"))
            if why is None and origin is not None and not is_loopback_host(headers.get("Host")):
                why = "a browser may call /mcp only under a loopback name (DNS rebinding)"
            if why is not None:
                return _refusal(403, f"Cross-site requests to /mcp are refused ({why}).")
        ctx = self.state.contexts.authenticate(agent_token(headers))
        if ctx is None:
            return _refusal(401, "Invalid or missing agent token. Send 'Authorization: Bearer <agent-id>:<secret>'.",
                            code=-32001, headers={"WWW-Authenticate": 'Bearer realm="memplane"'})
        wait = await self.state.rate_limiter.check(ctx.agent_id)
        if wait > 0:
            return _refusal(429, "Rate limit exceeded for this agent; retry later.", code=-32000,
                            headers={"Retry-After": retry_after_header(wait)})
        if request.method != "POST":
            # no stream of server messages to open (GET) and no session to end (DELETE): a GET would
            # otherwise hold a connection open that never carries anything
            return _refusal(405, "/mcp takes POST only (stateless Streamable HTTP).", headers={"Allow": "POST"})
        if not is_json_content_type(headers.get("Content-Type")):
            return _refusal(415, "A POST to /mcp carries a JSON-RPC message as application/json.")
        return await serve_asgi(self.manager.handle_request, request,
                                {AGENT_KEY: ctx, SESSION_KEY: headers.get("X-Session-Id") or None})


MCP_ENDPOINT = web.AppKey("memplane_mcp", McpEndpoint)


def add_mcp_routes(app: web.Application, state: ProxyState) -> None:
    endpoint = app[MCP_ENDPOINT] = McpEndpoint(state)
    app.on_startup.append(endpoint.start)
    app.on_cleanup.append(endpoint.stop)
    app.router.add_route("*", PATH, endpoint.handle)
