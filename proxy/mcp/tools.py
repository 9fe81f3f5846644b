"""The three memory tools an MCP client is offered: search, store, forget — each on behalf of the
one agent whose token came with the request, through the same memory-service client as the proxy.

* `search_memory` asks the REST API's search (`POST /api/memories/search`) for this agent only,
  bounded by the agent's recall deadline (memory.json `recall.timeout_ms`); the query is scrubbed
  before it leaves and each memory's text is scrubbed before the agent reads it.
* `store_memory` is the proxy's own tool (`memory_tool/write.py`): the same arguments, the same
  scrubbing, the same `memory_op: store` event, the same grant rule for scope `global`, and the same
  taint: `tainted` when the conversation it is called from (`X-Session-Id`, else the agent's latest
  proxied turn) carried a tool's output, or when the proxy saw no such turn (`turn_taint.py`).
* `forget_memory` deletes one memory by id only after reading it back as this agent's (another
  agent's id is "not found", exactly like an id that does not exist), with the reason in the
  service's audit trail; one `memory_op: forget` event.

A tool that cannot do its job answers with `isError` and a sentence the model can act on, never a
protocol error: the model reads it and carries on (MCP: tool errors belong in the result).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, TypeVar

import aiohttp
import mcp_types as types
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..context_store import AgentContext
from ..memory_service import MemoryService, MemoryServiceError
from ..memory_tool.offer import LOCAL_PARAMETERS, PARAMETERS
from ..memory_tool.write import store
from ..state import ProxyState

MAX_RESULTS = 20
MAX_VALUE_CHARS = 2000  # one memory's text as a tool result shows it

SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "query": {"type": "string", "description": "what to look for, in plain words"},
        "limit": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS,
                  "description": f"at most this many memories (default 5, at most {MAX_RESULTS})"},
    },
    "required": ["query"],
}
FORGET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string", "description": "the memory's id, as search_memory returned it"},
        "reason": {"type": "string", "description": "why it should be forgotten (kept in the audit trail)"},
    },
    "required": ["id", "reason"],
}


class SearchArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")
    query: str = Field(min_length=1, max_length=4000)
    limit: int = Field(default=5, ge=1, le=MAX_RESULTS)


class ForgetArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")
    id: str = Field(min_length=1, max_length=256)
    reason: str = Field(min_length=1, max_length=1000)


ArgsT = TypeVar("ArgsT", SearchArgs, ForgetArgs)


def tools_for(ctx: AgentContext) -> list[types.Tool]:
    """The tools as this agent sees them: `global` is offered only with the grant (like the proxy's)."""
    granted = ctx.memory is not None and "global" in ctx.memory.grants
    return [
        types.Tool(name="search_memory", description=(
            "Search your long-term memory (earlier conversations, saved facts). Returns memories with their ids."),
            input_schema=SEARCH_SCHEMA,
            annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False)),
        types.Tool(name="store_memory", description=(
            "Save a fact worth remembering in later conversations (the user's preferences, decisions, names, "
            "dates). The same key replaces the earlier value. Do not store secrets."),
            input_schema=PARAMETERS if granted else LOCAL_PARAMETERS,
            annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)),
        types.Tool(name="forget_memory", description=(
            "Forget one memory by its id (from search_memory), saying why. It is gone for good."),
            input_schema=FORGET_SCHEMA,
            annotations=types.ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)),
    ]


def _result(text: str, *, error: bool = False, structured: dict[str, Any] | None = None) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=text)], structured_content=structured,
                                is_error=error)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    return f"{'.'.join(str(p) for p in err.get('loc', ())) or 'arguments'}: {err.get('msg', 'invalid')}"


def _unanswered(exc: MemoryServiceError, timeout_ms: int) -> str:
    return f"memory did not answer within {timeout_ms} ms" if exc.timed_out else str(exc).rstrip(".")


@dataclass
class MemoryTools:
    """Runs one tool call for one authenticated agent (`ctx`)."""

    state: ProxyState
    ctx: AgentContext
    session_id: str | None = None

    async def call(self, name: str, arguments: dict[str, Any] | None) -> types.CallToolResult:
        if self.ctx.memory is None:
            return _result("This agent has no memory service (memory.json), so there is nothing to "
                           f"{name.split('_')[0]}.", error=True)
        args = arguments or {}
        if name == "search_memory":
            return await self.search(args)
        if name == "store_memory":
            tainted = self.state.turn_taint.tainted(self.ctx.agent_id, self.session_id)
            ok, text = await store(self.state, self.ctx, self.session_id, "mcp_" + uuid.uuid4().hex[:24], args,
                                   via="mcp", tainted=tainted)
            return _result(text, error=not ok)
        if name == "forget_memory":
            return await self.forget(args)
        return _result(f"There is no tool named {name!r}; use search_memory, store_memory or forget_memory.",
                       error=True)

    def _client(self, timeout_ms: int) -> MemoryService:
        manifest = self.ctx.memory
        assert manifest is not None and self.state.session is not None
        return MemoryService.of(self.state.session, manifest, self.ctx.agent_id, self.ctx.metadata.pod,
                                timeout=aiohttp.ClientTimeout(total=timeout_ms / 1000))

    def _event(self, op: str, started: float, *, ok: bool, status_code: int | None = None,
               error: str | None = None, **extra: Any) -> None:
        manifest = self.ctx.memory
        assert manifest is not None
        self.state.telemetry.memory_op(agent_id=self.ctx.agent_id, service=manifest.service, op=op,
                                       status="succeeded" if ok else "failed", status_code=status_code,
                                       latency_ms=round((time.perf_counter() - started) * 1000, 3),
                                       error=error, via="mcp", **extra)

    def _parsed(self, model: type[ArgsT], arguments: dict[str, Any], op: str, needs: str,
                started: float) -> ArgsT | types.CallToolResult:
        """The tool's arguments, or the tool error (and its memory_op event) that names what is missing."""
        try:
            return model.model_validate(arguments)
        except ValidationError as exc:
            why = f"{op}_memory needs {needs}: {_first_error(exc)}"
            self._event(op, started, ok=False, error=why)
            return _result(why, error=True)

    async def search(self, arguments: dict[str, Any]) -> types.CallToolResult:
        started = time.perf_counter()
        args = self._parsed(SearchArgs, arguments, "search", "a query", started)
        if isinstance(args, types.CallToolResult):
            return args
        manifest = self.ctx.memory
        assert manifest is not None
        deadline_ms = manifest.recall.timeout_ms if manifest.recall is not None else 300
        redact = self.state.redactor
        query = (await redact.text_async(args.query))[0]  # secrets never leave for a memory service
        try:
            found = await self._client(deadline_ms).search(query, top_k=args.limit)
        except MemoryServiceError as exc:
            why = _unanswered(exc, deadline_ms)
            self._event("search", started, ok=False, status_code=exc.status, error=why)
            return _result(f"search_memory found nothing: {why}.", error=True)
        # the service was asked for this agent only; what is not this agent's (or global) is dropped anyway
        mine = [m for m in found if isinstance(m, dict) and m.get("agent_id") in (self.ctx.agent_id, "*")]
        memories = [{"id": m.get("id"), "key": m.get("key"),
                     "text": redact.text(str(m.get("value", ""))[:MAX_VALUE_CHARS])[0], "kind": m.get("type"),
                     "scope": m.get("scope"), "score": m.get("score"), "when": m.get("said_at") or m.get("created_at"),
                     "origin": m.get("origin"), **({"writer": m["writer"]} if m.get("writer") else {})}
                    for m in mine[:args.limit]]
        self._event("search", started, ok=True, status_code=200, blocks=len(memories))
        if not memories:
            return _result("No memories match.", structured={"memories": []})
        # each says where its words came from (docs/DESIGN.md, "Memory poisoning"): only `user` is the person's
        lines = [f"- [{m['id']}] ({m['origin'] or 'unknown'}) {m['text']}" + (f" (key {m['key']})" if m.get("key") else "")
                 for m in memories]
        return _result("\n".join(lines), structured={"memories": memories})

    async def forget(self, arguments: dict[str, Any]) -> types.CallToolResult:
        started = time.perf_counter()
        args = self._parsed(ForgetArgs, arguments, "forget", "an id and a reason", started)
        if isinstance(args, types.CallToolResult):
            return args
        manifest = self.ctx.memory
        assert manifest is not None
        timeout_ms = manifest.forget.timeout_ms if manifest.forget is not None else 2000
        client = self._client(timeout_ms)
        reason = self.state.redactor.text(args.reason)[0]
        try:
            memory = await client.get(args.id)  # None for an id that is not this agent's (or global)
            if memory is None:
                self._event("forget", started, ok=False, status_code=404, error="not found", memory_id=args.id)
                return _result(f"forget_memory: no memory with id {args.id!r}.", error=True)
            if memory.get("agent_id") == "*" and "global" not in manifest.grants:
                why = "a global memory can be forgotten only by an agent with the global grant"
                self._event("forget", started, ok=False, status_code=403, error=why, memory_id=args.id)
                return _result(f"forget_memory: {why}.", error=True)
            await client.delete(args.id, reason, actor=f"mcp:{self.ctx.agent_id}")
        except MemoryServiceError as exc:
            why = _unanswered(exc, timeout_ms)
            self._event("forget", started, ok=False, status_code=exc.status, error=why, memory_id=args.id)
            return _result(f"forget_memory did not forget it: {why}.", error=True)
        self._event("forget", started, ok=True, status_code=204, memory_id=args.id, reason=reason)
        return _result(f"Forgot memory {args.id}.", structured={"forgotten": args.id})
