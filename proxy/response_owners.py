"""Which agent each Responses answer belongs to, so no agent continues another agent's.

Every agent calls the provider with the operator's one key, and a stored response is the whole
conversation so far: an agent that learnt another agent's response id (a log line, a shared tool
output) could continue — and read — that conversation with `previous_response_id`. The proxy
knows whose answers it relayed; naming another agent's is answered as the provider answers an id
it does not know. Bounded (least recently used out) and per proxy: an id it never relayed, or has
forgotten, goes on to the provider as before.
"""

from __future__ import annotations

from typing import Any

from cachetools import TTLCache

from .errors import ProxyError

MAX_IDS = 200_000  # ~100 bytes each
TTL_S = 30 * 24 * 3600.0  # the provider keeps stored responses 30 days


class ResponseOwners:
    def __init__(self, max_ids: int = MAX_IDS, ttl_s: float = TTL_S) -> None:
        self._owners: TTLCache[str, str] = TTLCache(maxsize=max_ids, ttl=ttl_s)

    def record(self, agent_id: str, response_id: Any) -> None:
        if isinstance(response_id, str) and response_id:
            self._owners[response_id] = agent_id

    def check(self, agent_id: str, body: dict[str, Any]) -> None:
        """400, in the provider's words, for a `previous_response_id` another agent's call produced."""
        previous = body.get("previous_response_id")
        owner = self._owners.get(previous) if isinstance(previous, str) else None
        if owner is not None and owner != agent_id:
            raise ProxyError(400, f"Previous response with id '{previous}' not found.",
                             code="previous_response_not_found", param="previous_response_id")
