"""One rule for recalled text a model or a tool wrote: which of it is bounded, how much of a block it
may take, and what may lead. Both engines (memory_adapters/engine), the reference adapter and the
proxy's policy step (proxy/recall_policy.py) apply this module, so they cannot disagree
(docs/provenance.md).

Trust follows taint, not the writer:

* the person's words (`user`), the operator's and the curator's drawn from them are trusted;
* a model's deliberate write (`store_memory`, over the proxy's tool or MCP) in a turn that carried no
  tool output, fetched text or other agent's text is the agent acting for the person: recalled like
  the person's facts — still labelled `origin="model"`, never a directive, a pin or under the user's
  heading (those rules read `origin`, not this module);
* everything else a model or a tool wrote — a tool's output, a write from a tainted turn, a model's
  reply, another agent's shared write — is *bounded*: together at most `UNTRUSTED_SHARE` of the
  block's budget (so one such memory still fits an otherwise empty block, and thirty poisoned turns
  cannot fill it), and a block of only bounded text never leads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TypeVar

from .contract import UNTRUSTED_ORIGINS

UNTRUSTED_SHARE = 0.25  # of the block's budget, at most, for bounded text (docs/provenance.md)

T = TypeVar("T")


def bounded_memory(origins: Iterable[str], *, tainted: bool, deliberate: bool) -> bool:
    """One stored memory: bounded unless its words are trusted (any origin outside model/tool) or it
    is a model's `deliberate` own write (not shared, not a reply) from an untainted turn."""
    said = frozenset(origins)
    if not said or not said <= UNTRUSTED_ORIGINS:
        return False
    return "tool" in said or tainted or not deliberate


def wire_bounded(origin: str | None, bounded: bool) -> bool | None:
    """What a service says of a block (`RecalledMemory.bounded`): only where it changes the proxy's
    reading, a block that only a model or a tool wrote; left out otherwise (bytes of every answer)."""
    words = set(origin.split()) if origin else set()
    return bounded if words and words <= UNTRUSTED_ORIGINS else None


def bounded_block(origin: str | None, said: bool | None) -> bool:
    """One recalled block as the proxy reads it (`origin`, and the service's `bounded`): bounded when
    the service says so, or when only a model or a tool wrote it — unless the service says it is a
    model's untainted write (`bounded: false`). Tool text is bounded whatever a service says; a
    service that says nothing gets the old, cautious reading."""
    if said:
        return True
    words = set(origin.split()) if origin else set()
    if not words or not words <= UNTRUSTED_ORIGINS:
        return False
    return said is None or "tool" in words


def puts_in_play(origin: str | None, bounded: bool) -> bool:
    """Whether showing a recalled block puts untrusted text in the model's context (so a write in that
    turn is tainted): a bounded block, or one holding a tool's words beside the user's."""
    return bounded or (origin is not None and "tool" in origin.split())


@dataclass
class BoundedShare:
    """What bounded text has taken of one recall, in any unit (characters, tokens)."""

    room: float
    used: int = 0

    @classmethod
    def of(cls, budget: float) -> BoundedShare:
        return cls(room=max(0.0, budget) * UNTRUSTED_SHARE)

    def admit(self, cost: int) -> bool:
        """Whether bounded text of `cost` still fits its share (and count it if so)."""
        if self.used + cost > self.room:
            return False
        self.used += cost
        return True


def lead_order(items: list[T], bounded: Callable[[T], bool]) -> list[T]:
    """`items` with the blocks of only bounded text after the rest, each side in its order: a page
    read in a tool result never leads a block."""
    first = [x for x in items if not bounded(x)]
    return items if len(first) in (0, len(items)) else first + [x for x in items if bounded(x)]


def trusted_lead(items: list[T], bounded: Callable[[T], bool]) -> list[T]:
    """`items` (one block's memories, in time order) with the bounded ones that come before the first
    trusted one moved to the end: a block that holds the person's words never begins with a page's
    (a model's tainted write is stored at once, the person's turn only when it is retained). The
    rest keep their order, a turn's tool part after its user part included."""
    lead = next((i for i, x in enumerate(items) if not bounded(x)), 0)
    return items[lead:] + items[:lead] if lead else items

