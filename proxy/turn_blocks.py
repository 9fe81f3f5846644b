"""One `<memories>` block per user turn: every call that continues a turn gets the first call's bytes.

A tool loop is several calls for one question. Recalling again at each step would change the block
(the loop's own steps are retained meanwhile), which breaks the provider's prompt cache inside the
loop and shows the model its own question as a memory. So the block a turn's first call got is
remembered briefly, per agent and conversation, and replayed on its continuations:

* Chat Completions / Messages / Responses with full history: keyed by a hash of the conversation up
  to the newest user message that has text (the question), `cache_control` markers left out and
  string content read as its text block, since clients move their breakpoint from call to call (and
  write the message they mark as a block). A call with nothing after that message starts a turn (it
  always recalls afresh); a call with tool calls and results after it continues one.
* Responses chains: keyed by the `previous_response_id` the continuation names; each answered call
  links its own response id to the turn, so the chain can go on for as many steps as it takes.
* Responses conversations (`conversation`: the provider keeps the items): a call that sends only
  tool outputs continues the conversation's latest turn, kept under the conversation's id.

Only calls that offer tools are remembered (no tools, no loop to continue), bounded by bytes
(`max_bytes`, least recently used first out) and short-lived (`ttl_s`): a miss only means one more
recall.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson
from cachetools import TTLCache

from memplane_core.turn_text import latest_user_index, text_of

from .recall_policy import InjectedMemory

MAX_BYTES = 32 * 1024 * 1024
TTL_S = 900.0


@dataclass(frozen=True)
class TurnBlock:
    """What the turn's first call injected, to inject again byte for byte."""

    block: str
    memories: tuple[InjectedMemory, ...]
    placement: str
    note: str | None
    question: str  # the turn's question, redacted: what a Responses continuation's ledger line lacks
    detail: dict[str, Any] = field(default_factory=dict)  # the first call's explanation
    # why the opt-in store_memory tool was withheld from the first call (memory_tool.offered), if it
    # was: the loop's later calls go without it too, so the tool list — the head of the cached
    # prefix — stays the same even when the client relaxes `tool_choice` after the first call
    withheld: dict[str, str] = field(default_factory=dict, compare=False)
    # the tool loop the turn's first call named (ledger `loop_key`): a continuation that carries no
    # user message (a Responses chain or conversation step) is a step of that loop, not a loop of its own
    loop: str | None = field(default=None, compare=False)


@dataclass(frozen=True)
class TurnKey:
    key: str | None  # None: nothing to key by (no user text, no chain)
    continues: bool  # the call continues a turn (tool results after the question, or a chain step)
    question_index: int | None = None


def _strip_cache_marks(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip_cache_marks(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_strip_cache_marks(v) for v in value]
    return value


def _as_sent(message: Any) -> Any:
    """A message as the API reads it: string content is the one text block it stands for. A client
    that slides its breakpoint writes its newest message as a block (to mark it) and the same
    message as a string on the next call."""
    if isinstance(message, dict) and isinstance(message.get("content"), str):
        message = {**message, "content": [{"type": "text", "text": message["content"]}]}
    return _strip_cache_marks(message)


def _digest(*parts: Any) -> str:
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()


def conversation_of(body: dict[str, Any]) -> str | None:
    """The Responses `conversation` a call names: its id, or an object with an `id`."""
    conv = body.get("conversation")
    if isinstance(conv, dict):
        conv = conv.get("id")
    return conv if isinstance(conv, str) and conv else None


def conversation_key(agent_id: str, conversation: str) -> str:
    return _digest(agent_id, "conversation", conversation)


def turn_key(agent_id: str, fmt_name: str, body: dict[str, Any], messages: list[Any]) -> TurnKey:
    """Which user turn a call belongs to (see the module docstring)."""
    i = latest_user_index(messages, skip_tool_results=True)
    chained = body.get("previous_response_id")
    if isinstance(chained, str) and chained and i is None:
        return TurnKey(_digest(agent_id, "chain", chained), True)
    conversation = conversation_of(body)
    if conversation and i is None:
        return TurnKey(conversation_key(agent_id, conversation), True)
    if i is None:
        return TurnKey(None, False)
    prefix = [_as_sent(m) for m in messages[: i + 1]]
    key = _digest(agent_id, fmt_name, chained if isinstance(chained, str) else None, prefix)
    return TurnKey(key, i < len(messages) - 1, i)


def offers_tools(body: dict[str, Any]) -> bool:
    """A call can only be continued by tool results when the model was offered tools."""
    return bool(body.get("tools") or body.get("functions"))


def _size(turn: TurnBlock) -> int:
    """Roughly what a remembered turn holds: the block and its memories, twice over for the rest."""
    return 2 * (len(turn.block) + sum(len(m.text) for m in turn.memories) + len(turn.question)) + 1024


def chain_key(agent_id: str, response_id: str) -> str:
    return _digest(agent_id, "chain", response_id)


def question_of(messages: list[Any], key: TurnKey) -> str:
    if key.question_index is None:
        return ""
    return text_of(messages[key.question_index].get("content")).strip()


class TurnBlocks:
    """The bounded, expiring map from a user turn to its block."""

    def __init__(self, max_bytes: int = MAX_BYTES, ttl_s: float = TTL_S) -> None:
        self._turns: TTLCache[str, TurnBlock] = TTLCache(maxsize=max_bytes, ttl=ttl_s, getsizeof=_size)

    def get(self, key: str | None) -> TurnBlock | None:
        return self._turns.get(key) if key else None

    def put(self, key: str | None, turn: TurnBlock) -> None:
        if key and _size(turn) <= self._turns.maxsize:
            self._turns[key] = turn

    async def fetch(self, key: str | None) -> TurnBlock | None:
        """`get`, for callers that also serve a shared store (`shared_state.RedisTurnBlocks`)."""
        return self.get(key)

    def link(self, agent_id: str, response_id: str | None, turn: TurnBlock | None) -> None:
        """A response of the turn: a call that continues from it (`previous_response_id`) is the same turn."""
        if response_id and turn is not None:
            self.put(chain_key(agent_id, response_id), turn)

    def __len__(self) -> int:
        return len(self._turns)
