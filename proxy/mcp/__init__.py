"""Memory as MCP tools at `/mcp` on the proxy's port (Streamable HTTP, the `mcp` package).

* `endpoint.py` the route: Origin/Host, the agent's bearer token, rate limit, method, content type;
  the session manager's lifetime (made on the first call: the `mcp` package is imported then);
* `server.py`   the `mcp` package's `Server` with the tools, behind its session manager (stateless,
  JSON answers);
* `scope.py`    what the route hands the server in the ASGI scope;
* `tools.py`    `search_memory`, `store_memory` (the proxy's own write), `forget_memory`;
* `asgi.py`     one aiohttp request handed to the ASGI side and its answer handed back.
"""

from .endpoint import MCP_ENDPOINT, PATH, add_mcp_routes

__all__ = ["MCP_ENDPOINT", "PATH", "add_mcp_routes"]
