"""Replies as an assistant in a conversation gives them: one or two ordinary sentences that carry
no fact (an acknowledgement, a question back).

The LoCoMo protocol's provider answers every turn "OK.", which an engine can drop as saying
nothing; every real conversation has replies like these beside the person's words instead. They
are generic on purpose: nothing in them comes from the message (no word of it, no name, no place),
so a benchmark fed with them measures what replies do to memory, not what they leak. The reply is
chosen deterministically from the person's latest message, so a run is repeatable.
"""

from __future__ import annotations

import hashlib
from typing import Any

from memplane_core.turn_text import latest_user_index, text_of

OPENERS = (
    "That sounds really meaningful.",
    "Thanks for sharing that with me.",
    "That's great to hear!",
    "I can see why that matters to you.",
    "Wow, that sounds like quite an experience.",
    "That must have felt good.",
    "I appreciate you telling me about it.",
    "That sounds like a lot to deal with.",
    "What a lovely thing to hear.",
    "That's really interesting.",
    "It sounds like a lot has been going on.",
    "I'm glad you told me.",
    "Oh, I see.",
    "That makes a lot of sense.",
    "Good for you!",
    "I hear you.",
)
FOLLOW_UPS = (
    "How are you feeling about it now?",
    "What made you decide that?",
    "Tell me more whenever you like.",
    "How did it go in the end?",
    "What are you hoping comes next?",
    "",  # one sentence is enough sometimes
    "Has anything changed since then?",
    "What was the best part for you?",
    "I'd love to hear how it turns out.",
    "How did the people around you react?",
    "Is there anything I can help with?",
    "",
)


def small_talk(seed: str) -> str:
    """One reply for `seed` (the same seed, the same reply): an opener, and usually a question back."""
    h = int.from_bytes(hashlib.sha256(seed.encode("utf-8", "replace")).digest()[:8], "big")
    opener, follow = OPENERS[h % len(OPENERS)], FOLLOW_UPS[(h // len(OPENERS)) % len(FOLLOW_UPS)]
    return f"{opener} {follow}" if follow else opener


def small_talk_reply(body: dict[str, Any]) -> str:
    """A `FakeProvider.reply`: small talk chosen by the request's latest user message (Chat
    Completions and Anthropic `messages`, or Responses `input`)."""
    messages = body.get("messages") if isinstance(body.get("messages"), list) else body.get("input")
    if isinstance(messages, str):
        return small_talk(messages)
    if not isinstance(messages, list):
        return small_talk("")
    i = latest_user_index(messages)
    return small_talk(text_of(messages[i].get("content")) if i is not None else "")
