"""The stand-in provider's ways of answering a fed conversation turn, by name.

A benchmark that feeds a conversation through the proxy chooses how the provider replies to each
turn (`--replies NAME`): the published LoCoMo protocol's bare "OK.", or replies as an assistant in
a chat gives them. Each replier maps the person's latest message to the reply, deterministically,
so a run is repeatable. A replier written apart from the engine's rules and never used to tune
them is a held-out stand-in: its numbers are reported first.
"""

from __future__ import annotations

from typing import Any, Callable

from memplane_core.turn_text import latest_user_index, text_of

from .assistant_replies import assistant_reply
from .assistant_replies_b import assistant_reply_b
from .small_talk import small_talk

Replier = Callable[[str], str]

REPLIERS: dict[str, Replier] = {
    "small-talk": small_talk,
    "assistant": assistant_reply,
    "ok": lambda message: "OK.",
    "assistant-b": assistant_reply_b,  # the held-out stand-in: written apart, never tuned against
}


def reply_to(name: str, message: str) -> str:
    """The reply `name` (a key of REPLIERS) gives to the person's `message`."""
    return REPLIERS[name](message)


def latest_message(body: dict[str, Any]) -> str:
    """The latest user message of a Chat Completions / Anthropic `messages` or Responses `input` body."""
    messages = body.get("messages") if isinstance(body.get("messages"), list) else body.get("input")
    if isinstance(messages, str):
        return messages
    if not isinstance(messages, list):
        return ""
    i = latest_user_index(messages)
    return text_of(messages[i].get("content")) if i is not None else ""


def body_replier(name: str) -> Callable[[dict[str, Any]], str]:
    """A `FakeProvider.reply` answering each request as `name` answers its latest user message."""
    replier = REPLIERS[name]
    return lambda body: replier(latest_message(body))
