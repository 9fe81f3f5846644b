"""Anthropic message threads of agents with memory are kept by memplane, not by the provider.

A message thread (the anthropic SDK's `message-threads` beta, which its tool runner uses) lets a
`continue` call send only the new messages: the server keeps the rest, `system` and `tools`
included. Whatever memplane injected would be kept too, and pile up turn after turn (1, 2, 3
blocks), stale. So memplane holds the thread itself: a call that creates one goes upstream without
`thread`; a `continue` is expanded into the whole conversation (the client's own messages and the
replies, never memplane's block) and goes upstream the same way, with this turn's block after it.
The provider sees ordinary requests; the prefix it cached stays byte-identical.

Bounded by bytes, LRU, for an hour. A thread memplane no longer has (a restart, eviction, a stream
that broke off) is answered as the API answers a lost thread — 400 with `error.details.error_code`
`thread_not_found` — and the SDK replays the full history under a new thread, as it does there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from cachetools import TTLCache

from .errors import ProxyError

MAX_BYTES = 64 * 1024 * 1024
TTL_S = 3600.0
CREATE_ONLY = ("system", "tools")  # what a thread keeps from the call that created it


@dataclass(frozen=True)
class Thread:
    fields: dict[str, Any]  # system and tools, as the creating call sent them
    messages: list[Any]  # the client's messages and the replies, in order
    size: int


@dataclass(frozen=True)
class Pending:
    """What a threaded call will leave once its reply is known."""

    fields: dict[str, Any]
    messages: list[Any]
    previous: tuple[str, str] | None = None  # the reply it continued: a reply is continued once


def thread_not_found(previous: Any) -> ProxyError:
    """The API's answer to a thread it does not hold: the SDK then replays the whole history."""
    return ProxyError(400, f"thread not found: no stored message {previous!r}; send the whole history to "
                           "start a new thread.", param="thread", details={"error_code": "thread_not_found"})


def _size(thread: Thread) -> int:
    return thread.size


class Threads:
    def __init__(self, max_bytes: int = MAX_BYTES, ttl_s: float = TTL_S) -> None:
        self._threads: TTLCache[tuple[str, str], Thread] = TTLCache(maxsize=max_bytes, ttl=ttl_s, getsizeof=_size)

    def expand(self, agent_id: str, body: dict[str, Any]) -> tuple[dict[str, Any], Pending | None]:
        """The request a threaded call stands for, without `thread`; unthreaded calls as they are."""
        thread = body.get("thread")
        if thread is None:
            return body, None
        plain = {k: v for k, v in body.items() if k != "thread"}
        if not isinstance(thread, dict) or thread.get("type") not in ("create", "continue"):
            raise ProxyError(400, "thread: expected an object with type 'create' or 'continue'.", param="thread")
        new = body.get("messages") if isinstance(body.get("messages"), list) else []
        if thread["type"] == "create":
            return plain, Pending({k: body[k] for k in CREATE_ONLY if k in body}, list(new))
        repeated = [f for f in CREATE_ONLY if f in body]
        if repeated:
            raise ProxyError(400, f"{', '.join(repeated)}: cannot be set on a `continue` request; the thread keeps "
                                  "the values it was created with.", param=repeated[0])
        previous = thread.get("previous_message_id")
        held = self._threads.get((agent_id, previous)) if isinstance(previous, str) else None
        if held is None:
            raise thread_not_found(previous)
        messages = [*held.messages, *new]
        return {**plain, **held.fields, "messages": messages}, Pending(held.fields, messages, (agent_id, previous))

    async def prefetch(self, agent_id: str, body: dict[str, Any]) -> None:
        """Nothing to fetch here; a shared store (`shared_state.RedisThreads`) loads a thread another
        proxy holds before `expand` looks for it."""

    def record(self, agent_id: str, pending: Pending | None, message_id: Any, content: Any) -> None:
        """The reply `message_id` continues the thread; without a whole reply nothing is kept."""
        if pending is None or not isinstance(message_id, str) or not isinstance(content, list):
            return
        messages = [*pending.messages, {"role": "assistant", "content": content}]
        size = len(orjson.dumps([pending.fields, messages])) + 256
        if pending.previous is not None:
            self._threads.pop(pending.previous, None)
        if size <= self._threads.maxsize:
            self._threads[(agent_id, message_id)] = Thread(pending.fields, messages, size)
