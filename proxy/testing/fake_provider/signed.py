"""Signed model state the client must hand back unchanged: Anthropic `thinking` blocks and OpenAI
Responses `reasoning` items with `encrypted_content`.

Coding agents (Claude Code with interleaved thinking, Codex with `store: false` and
`include: ["reasoning.encrypted_content"]`) send the model's earlier reasoning back on every step
of a tool loop. The real APIs check it: a thinking block whose text or signature was changed, or
encrypted reasoning that was tampered with, is refused. A proxy that edits earlier turns (to
inject or strip memory) must leave these bytes alone; this module lets the fake provider tell.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid
from typing import Any

from .rules import Problem, _blocks

THINKING = "Plan: look at what the user asked, use a tool if it needs one, then answer briefly."


class Signer:
    """HMAC over the hidden reasoning text with a key only this provider knows."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def _mac(self, text: str) -> str:
        return hmac.new(self._key, text.encode(), hashlib.sha256).hexdigest()

    def seal(self, text: str) -> str:
        """An opaque token carrying `text` and its MAC (the shape of a signature / encrypted_content)."""
        raw = base64.urlsafe_b64encode(text.encode()).decode()
        return f"{raw}.{self._mac(text)}"

    def open(self, token: Any) -> str | None:
        """The text a token carries, or None when it was not made here or was changed."""
        if not isinstance(token, str) or "." not in token:
            return None
        raw, _, mac = token.rpartition(".")
        try:
            text = base64.urlsafe_b64decode(raw.encode()).decode()
        except (ValueError, UnicodeDecodeError):
            return None
        return text if hmac.compare_digest(mac, self._mac(text)) else None

    # -- Anthropic --

    def thinking_block(self, display: str | None) -> dict[str, Any]:
        # https://platform.claude.com/docs/en/build-with-claude/extended-thinking — a thinking block
        # carries the (summarised) reasoning and an opaque `signature`; with `display: "omitted"`
        # the text is left out but the signature still verifies the hidden reasoning.
        shown = "" if display == "omitted" else THINKING
        return {"type": "thinking", "thinking": shown, "signature": self.seal(THINKING)}

    def thinking_problem(self, body: dict[str, Any]) -> Problem | None:
        """The first thinking block that was not handed back as issued, or a tool loop whose last
        assistant turn lost its thinking."""
        messages = [m for m in body.get("messages") or () if isinstance(m, dict)]
        for i, m in enumerate(messages):
            if m.get("role") != "assistant":
                continue
            for k, block in enumerate(_blocks(m.get("content"))):
                if block.get("type") != "thinking":
                    continue
                hidden = self.open(block.get("signature"))
                # extended-thinking docs ("Preserving thinking blocks"): thinking blocks must be
                # passed back unmodified; a changed block fails signature verification (400).
                if hidden is None or block.get("thinking") not in ("", hidden):
                    return Problem(f"messages.{i}.content.{k}: Invalid `signature` in `thinking` block", "messages")
        if not _thinking_on(body):
            return None
        # extended-thinking docs ("Extended thinking with tool use"): during a tool loop the last
        # assistant message must start with its thinking block, or the API answers 400.
        last = next((i for i in range(len(messages) - 1, -1, -1) if messages[i].get("role") == "assistant"), None)
        if last is None or last == len(messages) - 1:
            return None
        blocks = _blocks(messages[last].get("content"))
        follows = _blocks(messages[last + 1].get("content"))
        in_loop = any(b.get("type") == "tool_use" for b in blocks) and \
            any(b.get("type") == "tool_result" for b in follows)
        if in_loop and blocks and blocks[0].get("type") not in ("thinking", "redacted_thinking"):
            return Problem(f"messages.{last}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
                           f"`{blocks[0].get('type')}`. When `thinking` is enabled, a final `assistant` message must "
                           "start with a thinking block (preceeding the lastmost set of `tool_use` and `tool_result` "
                           "blocks).", "messages")
        return None

    # -- OpenAI Responses --

    def reasoning_item(self) -> dict[str, Any]:
        # https://platform.openai.com/docs/guides/reasoning — with `store: false` and
        # `include: ["reasoning.encrypted_content"]` the reasoning item carries its state encrypted,
        # for the client to send back in the next request's `input`.
        return {"type": "reasoning", "id": f"rs_{uuid.uuid4().hex[:16]}", "summary": [],
                "encrypted_content": self.seal(THINKING)}

    def reasoning_problem(self, body: dict[str, Any], items: list[dict[str, Any]]) -> Problem | None:
        stored = body.get("store", True) is not False
        for k, item in enumerate(items):
            kind = item.get("type")
            if kind == "reasoning":
                token = item.get("encrypted_content")
                if token is None and not stored:
                    # Without `store` nothing is kept server-side, so a reasoning item is only
                    # usable with its encrypted content (guides/reasoning, "Encrypted reasoning items").
                    return Problem(f"Item with id '{item.get('id')}' not found. Items are not persisted when `store` "
                                   "is set to false. Try again with `store` set to true, or remove this item from "
                                   "your input.", f"input[{k}]", 404)
                if token is not None and self.open(token) is None:
                    return Problem(f"The encrypted content for item {item.get('id')} could not be verified.",
                                   f"input[{k}].encrypted_content", 400, "invalid_encrypted_content")
            elif kind == "item_reference" and not stored:
                return Problem(f"Item with id '{item.get('id')}' not found. Items are not persisted when `store` is "
                               "set to false.", f"input[{k}]", 404)
        return None


def _thinking_on(body: dict[str, Any]) -> bool:
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive")
