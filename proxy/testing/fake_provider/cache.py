"""Prompt-cache simulation following each provider's documented rules.

Tokens are estimated deterministically as ceil(chars / 4) of a canonical JSON rendering, so a
test can compare cached tokens with and without memory exactly, run after run.
"""

from __future__ import annotations

import hashlib
from collections import deque
from typing import Any

import orjson

from .rules import cache_blocks


def tokens_of(text: str | bytes) -> int:
    return -(-len(text) // 4)


def _canonical(block: dict[str, Any]) -> bytes:
    """A block's bytes for the cache key; where the breakpoint sits does not change the prefix."""
    return orjson.dumps({k: v for k, v in block.items() if k != "cache_control"}, option=orjson.OPT_SORT_KEYS)


class AnthropicCache:
    """Anthropic's explicit prompt caching
    (https://platform.claude.com/docs/en/build-with-claude/prompt-caching):

    * the prefix runs tools → system → messages; a block with `cache_control` is a breakpoint and
      the cache entry is the whole prefix up to and including it (an exact-bytes match);
    * a top-level `cache_control` (automatic caching) puts a breakpoint on the last block;
    * at most 4 breakpoints (enforced in rules.py); a prefix shorter than the model's minimum
      (1024 tokens for Sonnet/Opus) is not cached;
    * on a request, each breakpoint looks back over at most 20 earlier block boundaries for the
      longest prefix already cached (the "20-block lookback window");
    * usage reports `cache_read_input_tokens` (the hit), `cache_creation_input_tokens` (what is
      written up to the last breakpoint) and `input_tokens` (the rest, after the last breakpoint).
    """

    def __init__(self, min_tokens: int = 1024, lookback: int = 20) -> None:
        self.min_tokens = min_tokens
        self.lookback = lookback
        self.entries: dict[str, int] = {}

    def usage(self, body: dict[str, Any]) -> dict[str, int]:
        blocks = cache_blocks(body)
        digest = hashlib.sha256(str(body.get("model")).encode())
        hashes: list[str] = []
        ends: list[int] = []
        total = 0
        for block in blocks:
            raw = _canonical(block)
            digest.update(raw)
            hashes.append(digest.copy().hexdigest())
            total += tokens_of(raw)
            ends.append(total)
        breakpoints = [i for i, b in enumerate(blocks) if b.get("cache_control")]
        if body.get("cache_control") and blocks and len(blocks) - 1 not in breakpoints:
            breakpoints.append(len(blocks) - 1)  # automatic caching: the last cacheable block
        read = 0
        for bp in breakpoints:
            for j in range(bp, max(-1, bp - self.lookback - 1), -1):  # the breakpoint and 20 blocks before
                if hashes[j] in self.entries:
                    read = max(read, ends[j])
                    break
        written = 0
        for bp in breakpoints:
            if ends[bp] >= self.min_tokens:
                self.entries.setdefault(hashes[bp], ends[bp])
                written = max(written, ends[bp])
        creation = max(0, written - read)
        return {"input_tokens": max(1, total - read - creation), "cache_creation_input_tokens": creation,
                "cache_read_input_tokens": read}


class OpenAIPrefixCache:
    """OpenAI's automatic prompt caching (https://platform.openai.com/docs/guides/prompt-caching):
    no markers; a prompt of 1024 tokens or more is cached, a later prompt hits on the longest exact
    prefix it shares with an earlier one, and hits count in increments of 128 tokens (1024, 1152,
    …), reported as `usage.prompt_tokens_details.cached_tokens` (Responses:
    `usage.input_tokens_details.cached_tokens`)."""

    def __init__(self, min_tokens: int = 1024, step: int = 128, keep: int = 256) -> None:
        self.min_tokens = min_tokens
        self.step = step
        self.seen: deque[str] = deque(maxlen=keep)

    def cached_tokens(self, prompt: str) -> int:
        best = max((_common_prefix(prompt, s) for s in self.seen), default=0)
        if tokens_of(prompt) >= self.min_tokens:
            self.seen.append(prompt)
        hit = best // 4
        if hit < self.min_tokens:
            return 0
        return self.min_tokens + (hit - self.min_tokens) // self.step * self.step


def _common_prefix(a: str, b: str) -> int:
    n = min(len(a), len(b))
    lo, hi = 0, n
    while lo < hi:  # binary search on prefix equality: O(n log n) at worst, no char-by-char Python loop
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo


def openai_prompt(tools: Any, items: list[Any]) -> str:
    """The order OpenAI renders a prompt in for caching: tool definitions, then the messages/items."""
    parts = [orjson.dumps(t, option=orjson.OPT_SORT_KEYS).decode() for t in tools or ()]
    parts += [orjson.dumps(m, option=orjson.OPT_SORT_KEYS).decode() for m in items]
    return "\n".join(parts)
