"""What the aiohttp route hands the MCP server in the ASGI scope (keys both sides name)."""

AGENT_KEY = "memplane.agent"  # the authenticated AgentContext
SESSION_KEY = "memplane.session_id"  # the client's X-Session-Id, for store_memory's scope `session`
