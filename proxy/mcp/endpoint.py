"""`/mcp` on the proxy's port: memory as MCP tools over Streamable HTTP.

The protocol is the `mcp` package's: its low-level `Server` (tools/list, tools/call) behind its
`StreamableHTTPSessionManager`, stateless and answering JSON (each POST stands alone, so no session
can outlive or change hands between agents; both the initialize handshake and the 2026 per-request
era work). aiohttp does what the proxy does for every route before the ASGI side sees the request:

1. a browser's request must come from this server under a loopback name (`Origin` matches `Host`,
   and `Host` is loopback): the DNS-rebinding defence the MCP spec asks for (403);
2. the agent's token `<agent-id>:<secret>` as a bearer, checked like the proxy's (401 with
   `WWW-Authenticate: Bearer`), then the agent's rate limit (429);
3. POST only (405: nothing to stream on a GET, no session to DELETE), its body `application/json` (415);
4. the body one JSON-RPC message (`envelope.py`: a parse error, an invalid request or invalid params
   answered with JSON-RPC's own code, never handed to the package).

The authenticated agent travels in the ASGI scope; the tools read it from there, never from the body.
The `mcp` side (`server.py`) is imported on the first call that gets this far.
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Any

from aiohttp import web

from memplane_core.local_trust import cross_site, is_json_content_type, is_loopback_host

from ..rate_limit import retry_after_header
from ..state import ProxyState
from ..transport_errors import read_request_body
from ..upstream import agent_token
from .asgi import serve_asgi
from .envelope import envelope_refusal
from .scope import AGENT_KEY, SESSION_KEY

PATH = "/mcp"


def _refusal(status: int, message: str, code: int = -32600, headers: dict[str, str] | None = None) -> web.Response:
    """A JSON-RPC error body with the HTTP status that says why (what MCP clients read)."""
    return web.json_response({"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": message}},
                             status=status, headers=headers)


class McpEndpoint:
    """The aiohttp handler in front of the `mcp` session manager, and the manager's lifetime: made on
    the first call that passes the checks (`server.py` is imported then, not with the proxy), run in
    one asyncio task (anyio's task group is entered and left in the same task) until cleanup."""

    def __init__(self, state: ProxyState) -> None:
        self.state = state
        self.manager: Any = None
        self._starting: asyncio.Future | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    async def _started(self) -> Any:
        if self.manager is None:
            if self._starting is None:
                self._starting = asyncio.ensure_future(self._start())
            # shielded: a first caller that goes away must not leave a half-started manager behind
            await asyncio.shield(self._starting)
        return self.manager

    async def _start(self) -> None:
        try:
            # imported in a thread: the first call waits for it, other agents' turns do not
            server = await asyncio.get_running_loop().run_in_executor(
                None, importlib.import_module, "proxy.mcp.server")
            manager = server.session_manager(self.state)
            running = asyncio.Event()

            async def run() -> None:
                async with manager.run():
                    running.set()
                    await self._stop.wait()

            self._task = asyncio.create_task(run(), name="mcp-session-manager")
            started = asyncio.create_task(running.wait())
            await asyncio.wait({self._task, started}, return_when=asyncio.FIRST_COMPLETED)
            if not running.is_set():
                started.cancel()
                self._task.result()  # it failed to start: say why
            self.manager = manager
        except BaseException:
            self._starting = None  # the next call tries again
            raise

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
        body = await read_request_body(request)  # gzip that is not, a body cut short: 400
        refusal = envelope_refusal(body)  # no JSON-RPC message: its own error code, not the package's -32602
        if refusal is not None:
            return refusal
        manager = await self._started()
        return await serve_asgi(manager.handle_request, request,
                                {AGENT_KEY: ctx, SESSION_KEY: headers.get("X-Session-Id") or None}, body)


MCP_ENDPOINT = web.AppKey("memplane_mcp", McpEndpoint)


def add_mcp_routes(app: web.Application, state: ProxyState) -> None:
    endpoint = app[MCP_ENDPOINT] = McpEndpoint(state)
    app.on_cleanup.append(endpoint.stop)
    app.router.add_route("*", PATH, endpoint.handle)
