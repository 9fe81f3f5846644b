"""One `store_memory` call, written through the memory service's REST API (`POST /api/memories`,
upsert by agent + scope + key). Whatever goes wrong becomes a tool error for the model, never a
failed turn: bad arguments, a refused scope (`global` needs a grant), an unreachable service."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import aiohttp
import orjson

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from memplane_core.contract import RESERVED_METADATA, single_line
from memplane_core.foreign_text import answer_carries_foreign_text

from ..memory_service import MemoryService, MemoryServiceError

TIMEOUT = aiohttp.ClientTimeout(total=5)
MAX_METADATA_BYTES = 4096
# How many memories one turn (one call to memplane, with its follow-up calls) may write: a model
# steered by a hostile page cannot flood the store from one answer (docs/DESIGN.md, "Memory poisoning").
MAX_WRITES_PER_TURN = 5
_TURNS_KEPT = 4096
_writes: dict[str, int] = {}  # turn id → writes so far (the newest turns only)


def _metadata_fits(metadata: dict[str, Any]) -> bool:
    """Whether the model's metadata goes to the memory service: JSON of at most MAX_METADATA_BYTES.
    An integer past 64 bits or nesting past 255 levels (an MCP client's arguments are read by
    pydantic, which takes both) cannot be sent as JSON at all."""
    try:
        return len(orjson.dumps(metadata, default=str)) <= MAX_METADATA_BYTES
    except orjson.JSONEncodeError:
        return False


def _count_write(turn_id: str) -> bool:
    """Whether this turn may write once more (and count it if so)."""
    done = _writes.pop(turn_id, 0)
    _writes[turn_id] = done + (done < MAX_WRITES_PER_TURN)
    while len(_writes) > _TURNS_KEPT:
        del _writes[next(iter(_writes))]
    return done < MAX_WRITES_PER_TURN


class StoreArgs(BaseModel):
    model_config = ConfigDict(extra="ignore")
    key: Annotated[str, Field(min_length=1, max_length=256), AfterValidator(single_line)]
    value: str = Field(min_length=1, max_length=65536)
    scope: Literal["session", "agent", "global"] = "agent"
    metadata: dict[str, Any] = Field(default_factory=dict)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "arguments"
    return f"{where}: {err.get('msg', 'invalid')}"


async def store(state: Any, ctx: Any, session_id: str | None, turn_id: str, arguments: Any, *,
                via: str = "store_memory", tainted: bool = False) -> tuple[bool, str]:
    """(ok, the text the model gets back), and a `memory_op: store` event either way. `via` says who
    asked: the proxy's tool in a turn, or an MCP client (`proxy/mcp/`; `turn_id` is then its call's id).
    Either way the memory is the model's (`origin: model`, written by this agent; `tainted` when the
    turn carried tool results, `turn_taint.py`): the store never takes it for the user's words, and
    recalls an untainted one like the person's facts, a tainted one within its share (docs/provenance.md)."""
    manifest = ctx.memory
    started = time.perf_counter()
    status_code: int | None = None

    def said(ok: bool, text: str, **extra: Any) -> tuple[bool, str]:
        state.telemetry.memory_op(agent_id=ctx.agent_id, service=manifest.service, op="store",
                                  status="succeeded" if ok else "failed", status_code=status_code,
                                  latency_ms=round((time.perf_counter() - started) * 1000, 3),
                                  error=None if ok else text, turn_id=turn_id,
                                  **({"via": via} if via != "store_memory" else {}), **extra)
        return ok, text

    try:
        args = StoreArgs.model_validate(arguments)
    except ValidationError as exc:
        return said(False, f"store_memory was not saved: {_first_error(exc)}")
    if args.scope == "global" and "global" not in manifest.grants:
        # the manifest's token is often the service's admin token: the proxy enforces the grant itself
        return said(False, "store_memory was not saved: scope 'global' needs a grant this agent does not have "
                           "(memory.json \"grants\": [\"global\"]); use scope 'agent'")
    if args.scope == "session" and not session_id:
        return said(False, "store_memory was not saved: scope 'session' needs a session, and this call has none; "
                           "use scope 'agent'")
    if not _count_write(turn_id):
        return said(False, f"store_memory was not saved: one turn may store at most {MAX_WRITES_PER_TURN} memories")
    # the store's bookkeeping (a pin, the curator's marks, the author, the origin) is never the model's to set
    metadata = {k: v for k, v in args.metadata.items() if isinstance(k, str) and k not in RESERVED_METADATA}
    if not _metadata_fits(metadata):
        metadata = {}
    # secrets never leave for a memory service, whoever writes: the model's words are scrubbed too
    redact = state.redactor
    body = {"agent_id": ctx.agent_id, "scope": args.scope, "key": redact.text(args.key)[0],
            "value": redact.text(args.value)[0], "type": "fact",
            "metadata": {**redact.json(metadata)[0], "via": via, "turn_id": turn_id,
                         "origin": "model", "writer": ctx.agent_id, **({"tainted": True} if tainted else {})}}
    if args.scope == "session":
        body["session_id"] = session_id
    client = MemoryService.of(state.session, manifest, ctx.agent_id, ctx.metadata.pod, timeout=TIMEOUT)
    try:
        created, _ = await client.upsert(body)
    except MemoryServiceError as exc:
        status_code = exc.status
        if exc.unreachable:
            text = str(exc)
            return said(False, f"store_memory was not saved: {text[0].lower()}{text[1:].rstrip('.')}")
        message = exc.service_message if exc.status is not None and exc.status < 500 else None
        return said(False, f"store_memory was not saved: the memory service refused it (status {exc.status}"
                           + (f": {message}" if message else "") + ")")
    status_code = 201 if created else 200
    return said(True, f"Saved ({'updated' if not created else 'new'}) under key {args.key!r}.",
                key=args.key, scope=args.scope)


@dataclass
class TurnWrites:
    """The store_memory calls of one turn, over its provider calls. They are `tainted` when the turn
    is (turn_taint.py), and from the first answer on that carries the results of a tool the provider
    ran itself (web search or fetch, file search, code execution, an MCP connector's call): the model
    read them before it wrote the call, though the request was clean (docs/provenance.md, "Taint by
    shape")."""

    state: Any
    ctx: Any
    session_id: str | None
    turn_id: str
    tainted: bool

    @classmethod
    def of(cls, state: Any, ctx: Any, session_id: str | None, turn_id: str, body: Any) -> TurnWrites:
        return cls(state, ctx, session_id, turn_id, state.turn_taint.of_turn(ctx.agent_id, session_id, turn_id, body))

    async def __call__(self, args: Any, answer: Any) -> tuple[bool, str]:
        """Store one call's `args`, written in `answer` (the provider's answer, or a stream's round as one)."""
        self.tainted = self.tainted or answer_carries_foreign_text(answer)
        return await store(self.state, self.ctx, self.session_id, self.turn_id, args, tainted=self.tainted)
