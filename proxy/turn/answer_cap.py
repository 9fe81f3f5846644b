"""How much of one answer the ledger keeps: its first `ledger_max_answer_bytes`.

Why: a streamed answer was held whole for the ledger until it ended, however long the provider
made it, so a provider (or a path to it) that streams without end grew the proxy's memory without
bound; a whole answer went to the ledger whole, one line as long as the answer. Past the cap the
ledger keeps the head, marked `truncated` with the answer's size (`answer_bytes`); the agent gets
every byte as before. A truncated answer is read no further than its head: its reply is not
taken for the model's whole answer (answer.py), as for one that broke off.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


class Head:
    """What the ledger keeps of a stream as it is relayed: its first `limit` bytes; the rest is only
    counted. Appended to and joined like the list of chunks it replaces."""

    __slots__ = ("chunks", "kept", "limit", "seen")

    def __init__(self, limit: int) -> None:
        self.chunks: list[bytes] = []
        self.limit, self.kept, self.seen = limit, 0, 0

    def append(self, chunk: bytes) -> None:
        self.seen += len(chunk)
        room = self.limit - self.kept
        if room > 0:
            part = chunk if len(chunk) <= room else chunk[:room]
            self.chunks.append(part)
            self.kept += len(part)

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.chunks)

    @property
    def truncated(self) -> bool:
        return self.seen > self.kept


def mark(response: dict[str, Any], answer_bytes: int) -> dict[str, Any]:
    """The ledger's record of an answer cut to its head."""
    response["truncated"] = True
    response["answer_bytes"] = answer_bytes
    return response


def whole_head(data: bytes, limit: int) -> dict[str, Any]:
    """A whole answer over the cap: its head, as text (the head of a JSON answer is not JSON)."""
    text = data[:limit].decode("utf-8", "ignore")  # a character cut at the cap is left out
    return {"response": mark({"format": "text", "text": text}, len(data)), "usage": None, "model": None}
