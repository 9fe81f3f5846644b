"""The `mcp` package's side of `/mcp`: its low-level `Server` with the memory tools, behind its
`StreamableHTTPSessionManager` (stateless, JSON answers). Imported by `endpoint.py` on the first
call to `/mcp`, not with the proxy: the package and what it pulls in (starlette, its protocol
models) take longer to import than the rest of the proxy, and most proxies never serve MCP."""

from __future__ import annotations

import traceback
from typing import Any

import mcp_types as types
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel.server import Server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings

from ..context_store import AgentContext
from ..state import ProxyState
from .envelope import MAX_BODY_BYTES
from .scope import AGENT_KEY, SESSION_KEY
from .tools import MemoryTools, tools_for

INSTRUCTIONS = ("memplane memory for this agent: search_memory before answering from what you remember, "
                "store_memory for facts worth keeping, forget_memory (with a reason) for what is wrong or unwanted.")


def _agent(ctx: ServerRequestContext[Any, Any]) -> tuple[AgentContext, str | None]:
    scope = getattr(ctx.request, "scope", None) or {}
    agent = scope.get(AGENT_KEY)
    if not isinstance(agent, AgentContext):  # only the aiohttp route reaches this server, after authenticating
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
        try:
            return await MemoryTools(state, agent, session_id).call(params.name, params.arguments)
        except Exception as exc:
            # the package would answer a protocol error with code 0 and the exception's words; a tool
            # that fails is the model's to read (MCP: tool errors belong in the result), and logged
            # as the proxy logs any failure no handler caught
            state.telemetry.error("unhandled_error", path="/mcp", error=type(exc).__name__,
                                  where=traceback.format_exc(limit=3).splitlines()[-1])
            return types.CallToolResult(content=[types.TextContent(
                text=f"{params.name} failed: an internal error of the proxy (logged).")], is_error=True)

    return Server("memplane-memory", version="1", instructions=INSTRUCTIONS,
                  on_list_tools=list_tools, on_call_tool=call_tool)


def session_manager(state: ProxyState) -> StreamableHTTPSessionManager:
    # Origin/Host are checked by the aiohttp route (loopback names, any port); the package's own
    # check takes fixed host:port lists, which a proxy on a free or configured port cannot name up front
    return StreamableHTTPSessionManager(
        build_server(state), stateless=True, json_response=True,
        security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        max_request_body_size=MAX_BODY_BYTES)
