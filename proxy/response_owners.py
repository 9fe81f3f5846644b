"""Which agent each id of provider-kept conversation state belongs to, so no agent continues
another agent's.

Every agent calls the provider with the operator's one key, and the provider keeps conversations
under that key: a stored Responses answer (`previous_response_id`), a Responses `conversation`,
an Anthropic message thread (`thread.previous_message_id`, for agents whose threads memplane does
not hold). An agent that learnt another agent's id (a log line, a shared tool output) could
continue — and read — that conversation. The proxy knows whose answers it relayed and who first
named a conversation; naming another agent's is answered as the provider answers an id it does
not know. Bounded (least recently used out) and per proxy: an id it never saw, or has forgotten,
goes on to the provider as before.
"""

from __future__ import annotations

from typing import Any

from cachetools import TTLCache

from .errors import ProxyError
from .threads import thread_not_found
from .turn_blocks import conversation_of

MAX_IDS = 200_000  # ~100 bytes each
TTL_S = 30 * 24 * 3600.0  # the provider keeps stored responses 30 days


def _previous_message(body: dict[str, Any]) -> str | None:
    thread = body.get("thread")
    previous = thread.get("previous_message_id") if isinstance(thread, dict) else None
    return previous if isinstance(previous, str) else None


class ResponseOwners:
    def __init__(self, max_ids: int = MAX_IDS, ttl_s: float = TTL_S) -> None:
        self._owners: TTLCache[tuple[str, str], str] = TTLCache(maxsize=max_ids, ttl=ttl_s)

    def record(self, agent_id: str, response_id: Any, kind: str = "response") -> None:
        """`kind`: "response" (a Responses answer's id) or "message" (an Anthropic threaded reply's)."""
        if isinstance(response_id, str) and response_id:
            self._owners[(kind, response_id)] = agent_id

    def _other(self, agent_id: str, kind: str, key: str | None) -> bool:
        owner = self._owners.get((kind, key)) if key else None
        return owner is not None and owner != agent_id

    def check(self, agent_id: str, body: dict[str, Any]) -> None:
        """The provider's own "not found" for another agent's response, conversation or thread;
        a conversation nobody named yet becomes this agent's (its id came from the provider)."""
        previous = body.get("previous_response_id")
        if isinstance(previous, str) and self._other(agent_id, "response", previous):
            raise ProxyError(400, f"Previous response with id '{previous}' not found.",
                             code="previous_response_not_found", param="previous_response_id")
        conversation = conversation_of(body)
        if conversation:
            if self._other(agent_id, "conversation", conversation):
                raise ProxyError(404, f"Conversation with id '{conversation}' not found.",
                                 code="conversation_not_found", param="conversation")
            self._owners[("conversation", conversation)] = agent_id
        message = _previous_message(body)
        if message and self._other(agent_id, "message", message):
            raise thread_not_found(message)
