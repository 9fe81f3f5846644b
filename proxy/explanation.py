"""A turn's explanation as a typed record: what recall did for one call (`RecallDetail`, built by
proxy/turn/report.py) and the whole turn (`TurnExplanation`). Stored and served as the same JSON
document as before (`as_dict`), so `/memplane/turns/{id}`, `memplane explain`, the inspector and a
Redis-shared explanation read one shape; a field that was never set is left out, not sent as null."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

_UNSET: Any = object()


def _set_fields(obj: Any) -> dict[str, Any]:
    """The fields that were set, in field order (a dataclass's __init__ sets every field in that
    order, so its __dict__ has them so; one pass over it, not a getattr per field)."""
    return {n: v for n, v in obj.__dict__.items() if v is not _UNSET}


def new_turn_id() -> str:
    """A turn's id: `turn_` and 96 random bits in hex (what `uuid4().hex[:24]` gave, without
    building a UUID on every turn)."""
    return "turn_" + os.urandom(12).hex()


@dataclass
class RecallDetail:
    """The recall part of a turn's explanation (which fields are set depends on the outcome)."""

    service: str | None = _UNSET
    query: str | None = _UNSET
    skipped: str = _UNSET  # why no recall was made
    error: str | None = _UNSET  # why recall failed or timed out
    block: str | None = _UNSET  # the injected `<memories>` block
    placement: str | None = _UNSET
    placement_note: str | None = _UNSET
    tokens: int = _UNSET
    ranking: str | None = _UNSET
    degraded: str = _UNSET  # the service answered with less than its usual ranking: lexical | shed | loading | other
    deadline_ms: int | None = _UNSET  # what the service was told it had (less after late answers)
    redactions: dict[str, int] = _UNSET
    memories: list[dict[str, Any]] = _UNSET  # per recalled item: kind, source, score, id, decision, text
    repeated_lines_dropped: int = _UNSET
    reused: str = _UNSET  # a continuation got its user turn's first block again
    set_aside: dict[str, Any] = _UNSET  # client scaffolding left out of the query and the retain (coding/)
    call_kind: str = _UNSET  # side | subagent | compaction: not an ordinary turn (coding/side_calls.py)
    call_rule: str = _UNSET  # the rule that decided the call's kind (coding/side_calls.py)
    project: str = _UNSET  # the project recall was scoped to (CONTRACT §5 metadata.project)
    project_from: str = _UNSET  # declared | session | agent-default (coding/reading.py)
    project_note: str = _UNSET  # no project: how to set one, or why this call leaves no memory
    already_in_request: int = _UNSET  # recalled lines left out: the request already carries them

    def as_dict(self) -> dict[str, Any]:
        return _set_fields(self)

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> RecallDetail:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in doc.items() if k in names})

    def injected_tokens(self) -> int:
        return 0 if self.tokens is _UNSET else self.tokens


@dataclass
class TurnExplanation:
    """Why one turn got the memories it got; `entry_id`, `ledger_end` and `status_code` are added
    when the ledger has the turn (`TurnExplanations.update`)."""

    turn_id: str
    agent_id: str
    ts: str
    at: float  # time.time(), for the inspector's last-hour chart (`_at`)
    format: str
    path: str
    status: str
    blocks: int
    removed: int
    latency_ms: float
    recall: RecallDetail = field(default_factory=RecallDetail)

    def as_dict(self) -> dict[str, Any]:
        return {"turn_id": self.turn_id, "agent_id": self.agent_id, "ts": self.ts, "_at": self.at,
                "format": self.format, "path": self.path, "tokens": self.recall.injected_tokens(),
                "recall": {"status": self.status, "blocks": self.blocks, "removed": self.removed,
                           "latency_ms": round(self.latency_ms, 3)},
                "memories": [], **self.recall.as_dict()}
