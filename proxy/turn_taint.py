"""Whether an agent's recent turn carried untrusted text, so that a memory its model writes is marked
`tainted` the same way whether it is written with the proxy's `store_memory` tool or over `/mcp`
(docs/provenance.md).

A turn is tainted when its request hands the model text nobody in the conversation typed (a tool's
result, a fetched page, a file, a search result, another agent's output, in any of the wire
formats' shapes: `foreign_text.carries_foreign_text`), or when the block memplane injected into it
shows such text (a tool's words, a tainted write, another agent's: `provenance.puts_in_play`; a
model that copies a recalled page into `store_memory` does not make it trusted). The proxy notes each turn of an agent
with memory, per turn and per agent and conversation (`X-Session-Id` or `metadata.session_id`),
for `TTL_S`:

* a conversation that carried such text stays tainted: Chat Completions and Messages resend it on
  every call, and a Responses chain or conversation keeps it at the provider;
* an MCP call (stateless: it carries no turn) asks for its `X-Session-Id`'s conversation; one
  that names none the proxy saw (or no `X-Session-Id`) is tainted when any of the agent's
  conversations was within `TTL_S` (choosing a fresh id does not make a write clean), and when the
  proxy saw no turn of the agent (no proxied turn within `TTL_S`, a turn another proxy served, an
  MCP client whose model is not proxied): the proxy vouches only for a context it saw.
"""

from __future__ import annotations

from typing import Any

from cachetools import TTLCache

from memplane_core.provenance import puts_in_play
from memplane_core.session_key import session_key
from memplane_core.foreign_text import carries_foreign_text

TTL_S = 900.0
MAX_KEYS = 100_000


def _chains(body: dict[str, Any]) -> bool:
    """The call continues context the provider holds (Responses `previous_response_id`, `conversation`,
    or an `item_reference` input item: an item it stored, named instead of sent, whatever it holds)."""
    if body.get("previous_response_id") or body.get("conversation"):
        return True
    items = body.get("input")
    return isinstance(items, list) and any(isinstance(x, dict) and x.get("type") == "item_reference" for x in items)


class TurnTaint:
    def __init__(self, ttl_s: float = TTL_S, max_keys: int = MAX_KEYS) -> None:
        self._seen: TTLCache[tuple[str, str | None], bool] = TTLCache(maxsize=max_keys, ttl=ttl_s)
        self._turns: TTLCache[str, bool] = TTLCache(maxsize=max_keys, ttl=ttl_s)
        # agents with a tainted conversation within `ttl_s`: kept apart from the sessions (which a
        # client names, so another agent's flood of new sessions can evict them), keyed by agent ids
        # the operator registered
        self._agents_tainted: TTLCache[str, bool] = TTLCache(maxsize=max_keys, ttl=ttl_s)

    def note(self, ctx: Any, session_id: str | None, turn_id: str, body: Any, turn: Any = None) -> bool:
        """Note one turn of an agent with memory (`ctx`): its request, and `turn`, the block injected
        into it (turn_blocks.TurnBlock), if any. Returns whether the turn is tainted."""
        if getattr(ctx, "memory", None) is None:
            return False
        recalled = getattr(turn, "memories", ())
        here = self._note(ctx.agent_id, session_id, body, any(puts_in_play(m.origin, m.bounded) for m in recalled))
        self._turns[turn_id] = here
        return here

    def answered_foreign(self, ctx: Any, session_id: str | None, turn_id: str) -> None:
        """An answer of the turn carried the results of a tool the provider ran itself (web search
        or fetch, file search, an MCP connector's call): from now on the conversation holds them (a
        resent history, a Responses chain or conversation), as if its request had."""
        if getattr(ctx, "memory", None) is None:
            return
        self._turns[turn_id] = True
        self._note(ctx.agent_id, session_id, None, True)

    def _note(self, agent_id: str, session_id: str | None, body: Any, shown_bounded: bool) -> bool:
        session_id = session_key(session_id) if session_id else None
        here = shown_bounded or carries_foreign_text(body)
        latest = (agent_id, None)
        if session_id:
            here = here or self._seen.get((agent_id, session_id), False)  # the conversation still holds it
            self._seen[(agent_id, session_id)] = here
        elif isinstance(body, dict) and _chains(body):
            here = here or self._seen.get(latest, False)
        self._seen[latest] = here
        if here:
            self._agents_tainted[agent_id] = True
        return here

    def of_turn(self, agent_id: str, session_id: str | None, turn_id: str, body: Any) -> bool:
        """Whether the turn `turn_id` that sends `body` is tainted (the proxy's own `store_memory`): as
        noted, else its own tool results or its conversation's."""
        noted = self._turns.get(turn_id)
        if noted is not None:
            return noted
        if carries_foreign_text(body):
            return True
        if session_id:
            return self._seen.get((agent_id, session_key(session_id)), False)
        return isinstance(body, dict) and _chains(body) and self._seen.get((agent_id, None), False)

    def tainted(self, agent_id: str, session_id: str | None) -> bool:
        """Whether a write now, in `session_id`'s conversation, may carry untrusted text. A write that
        names no conversation the proxy saw could come from any of the agent's: it is tainted when
        any of them was within `TTL_S` (else a write naming a fresh id would pass as clean beside a
        conversation that read a page), and when the proxy saw no turn of the agent at all."""
        said = self._seen.get((agent_id, session_key(session_id))) if session_id else None
        if said is not None:
            return said
        if self._agents_tainted.get(agent_id, False):
            return True
        return self._seen.get((agent_id, None)) is None
