"""What the proxy lets through from a recall answer before anything reaches a prompt (CONTRACT §5)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from memplane_core.contract import ORIGINS, RecalledMemory
from memplane_core.memo import TextMemo
from memplane_core.provenance import BoundedShare, bounded_block, lead_order
from memplane_core.redact import Redactor
from memplane_core.tokens import estimate_tokens

BLOCKED_KINDS = frozenset({"raw_transcript", "session_tail", "transcript_tail"})
# Bounded blocks (what a tool wrote, a model's tainted writes; memplane_core/provenance.py) take at most
# UNTRUSTED_SHARE of the block's budget whatever the service packed, and never lead: one poisoned
# source cannot fill the block (docs/provenance.md). Dropped ones are `untrusted_share` in the explanation.


_CLOSED: TextMemo[str | None] = TextMemo(entries=256, key_chars=200)  # an origin as written -> as kept
_UNSEEN = object()


def closed_origin(origin: str | None) -> str | None:
    """A service's `origin` kept only as the closed words it may hold (ORIGINS), in their order."""
    if not origin:
        return None
    out = _CLOSED.get(origin, _UNSEEN)
    if out is _UNSEEN:
        said = set(origin.split())
        kept = [o for o in ORIGINS if o in said]
        out = " ".join(kept) if kept and len(kept) == len(said) else None
        _CLOSED.put(origin, out)
    return out  # type: ignore[return-value]


def _bounded(item: RecalledMemory) -> bool:
    return bounded_block(closed_origin(item.origin), item.bounded)


@dataclass(frozen=True)
class InjectedMemory:
    """A recalled memory that policy let through, redacted, ready for the `<memories>` block."""

    text: str
    kind: str | None = None
    source: str | None = None
    ts: str | None = None
    score: float | None = None
    id: str | None = None
    title: str | None = None
    origin: str | None = None  # where its words came from (ORIGINS, space-separated); None: the service did not say
    writer: str | None = None  # the agents that wrote its memories
    bounded: bool = False  # only bounded text (memplane_core/provenance.py): the turn that shows it is tainted


@dataclass
class PolicyResult:
    memories: list[InjectedMemory]
    removed: int = 0  # blocks dropped (transcripts, blanks, over limits)
    reasons: Counter[str] = field(default_factory=Counter)  # why, per reason
    decisions: list[str] = field(default_factory=list)  # per recalled item, in order: "injected" or the reason
    redactions: Counter[str] = field(default_factory=Counter)

    @property
    def memory_removed(self) -> int:
        return self.removed + sum(self.redactions.values())


def apply_policy(raw: list[RecalledMemory], redactor: Redactor, *, max_blocks: int,
                 budget_tokens: int) -> PolicyResult:
    """Drop transcripts and blanks, redact secrets, keep the service's order within limits — but a
    block of only bounded text never leads: `raw` is put in that order in place, so the turn's
    explanation lists the answer in the order policy read it."""
    raw[:] = lead_order(raw, _bounded)
    result = PolicyResult([])
    used = 0
    share = BoundedShare.of(budget_tokens)
    seen: set[str] = set()

    def drop(reason: str) -> None:
        result.removed += 1
        result.reasons[reason] += 1
        result.decisions.append(reason)

    for item in raw:
        kind, source, text = item.kind, item.source, item.text
        if (kind or "").casefold() in BLOCKED_KINDS or (source or "").casefold() in BLOCKED_KINDS:
            drop("transcript_kind")
            continue
        text = text.strip()
        if not text:
            drop("blank")
            continue
        if text in seen:
            drop("duplicate")
            continue
        if len(result.memories) >= max_blocks:
            drop("over_max_blocks")
            continue
        seen.add(text)
        text, _ = redactor.text(text, result.redactions)
        cost = estimate_tokens(text)
        if used + cost > budget_tokens:
            drop("over_budget")
            continue
        origin = closed_origin(item.origin)
        bounded = _bounded(item)
        if bounded and not share.admit(cost):
            drop("untrusted_share")
            continue
        used += cost
        result.decisions.append("injected")
        writer = " ".join(item.writer.split())[:200] if item.writer else None
        result.memories.append(InjectedMemory(text=text, kind=kind, source=source, ts=item.ts, score=item.score,
                                              id=item.id, title=item.title, origin=origin, writer=writer or None,
                                              bounded=bounded))
    return result
