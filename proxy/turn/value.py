"""The turn as a value: one agent call as it moves through the steps (docs/turn.md).

Each step reads what the steps before it filled in and fills in its own part; nothing else is
passed around, so a step's signature is `step(turn)` and a new feature is a field and a step.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..explanation import RecallDetail

if TYPE_CHECKING:
    import aiohttp
    from aiohttp import web

    from ..coding.reading import CodingTurn
    from ..context_store import AgentContext
    from ..formats import WireFormat
    from ..state import ProxyState
    from ..threads import Pending
    from ..turn_blocks import TurnBlock


@dataclass
class RecallSummary:
    """What memory did for one turn: the `X-Memplane-Recall` header."""

    status: str = "off"  # succeeded | degraded | failed | timed_out | skipped | reused | off
    blocks: int = 0
    removed: int = 0
    latency_ms: float = 0.0
    detail: RecallDetail = field(default_factory=RecallDetail)  # for the turn's explanation

    def header(self) -> str:
        return f"{self.status}; blocks={self.blocks}; removed={self.removed}; latency_ms={self.latency_ms:.1f}"


@dataclass(eq=False)
class Turn:
    """One call, the steps' common value. Fields are grouped by the step that fills them in."""

    request: web.Request
    fmt: WireFormat
    state: ProxyState
    started: float = field(default_factory=time.perf_counter)
    # read: who calls, and the request memplane works on
    ctx: AgentContext = None  # type: ignore[assignment]
    original: dict[str, Any] = field(default_factory=dict)  # as the agent sent it: the ledger's request_original
    body: dict[str, Any] = field(default_factory=dict)  # the same, its anthropic thread expanded
    thread: Pending | None = None  # the thread memplane holds for this call, if any
    session_id: str | None = None
    turn_id: str = ""
    # scope: the coding read (only for an agent with memory)
    coding: CodingTurn | None = None
    # recall and inject
    recall: RecallSummary = field(default_factory=RecallSummary)
    block: TurnBlock | None = None  # this user turn's block, kept for its continuations
    loop_key: str | None = None  # the user turn this call of a tool loop belongs to (ledger `loop_key`)
    effective: dict[str, Any] = field(default_factory=dict)  # what goes to the provider
    # offer and forward
    store_tool: bool = False  # the store_memory tool was offered (memory_tool/)
    hidden_usage: bool = False  # memplane asked for a usage chunk the agent did not
    chained: bool = False  # the answer's id continues this user turn (a Responses chain step)
    url: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    upstream: aiohttp.ClientResponse | None = None

    @property
    def agent_id(self) -> str:
        return self.ctx.agent_id

    @property
    def recalls(self) -> bool:
        """The agent has a memory service to recall from."""
        return self.ctx.memory is not None and self.ctx.memory.recall is not None

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))

    @property
    def said(self) -> dict[str, str]:
        """The headers memplane adds to every answer of the turn."""
        return {"X-Memplane-Turn-Id": self.turn_id, "X-Memplane-Recall": self.recall.header()}

    @property
    def question(self) -> str | None:
        """A continuation's ledger line carries its user turn's question (record_turn)."""
        return self.block.question if self.block is not None and self.recall.status == "reused" else None
