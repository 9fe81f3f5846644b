"""A bounded memo of what was worked out from a text: a JSON key's kind, a memory as shown, a text
part's digest. Agents resend the same texts every call, so the hot path remembers such answers;
this is the one bound they all keep (a text too long is not kept, and a full memo starts afresh:
no LRU bookkeeping, which cost more than the lookups it saved)."""

from __future__ import annotations

from typing import Generic, TypeVar

V = TypeVar("V")
_MISSING = object()


class TextMemo(Generic[V]):
    """Values keyed by text, at most `entries` of them, or at most `chars` characters of keys;
    a key longer than `key_chars` is never kept (it is the caller's: endless distinct texts only
    refill the memo, never grow it past its bound)."""

    __slots__ = ("_items", "_chars", "entries", "chars", "key_chars")

    def __init__(self, *, key_chars: int, entries: int | None = None, chars: int | None = None) -> None:
        self._items: dict[str, V] = {}
        self._chars = 0
        self.entries, self.chars, self.key_chars = entries, chars, key_chars

    def get(self, key: str, default: object = None) -> V | object:
        return self._items.get(key, default)

    def __contains__(self, key: str) -> bool:
        return key in self._items

    def put(self, key: str, value: V) -> None:
        if len(key) > self.key_chars:
            return
        if (self.entries is not None and len(self._items) >= self.entries) \
                or (self.chars is not None and self._chars + len(key) > self.chars):
            self._items.clear()
            self._chars = 0
        self._items[key] = value
        self._chars += len(key)
