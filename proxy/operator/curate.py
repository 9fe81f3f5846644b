"""What the inspector needs to curate memories: the memory service's REST API (list, search, get,
edit, forget, audit trail) as one small client, readable keys, and the ledger entry behind a memory.

The inspector pages (ui.py) only render; every call to the memory service goes through
the memory-service client (`proxy/memory_service/`), so a slow or broken service becomes one `CurateError` message on the page.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timezone
from typing import Any

from markupsafe import Markup, escape

from memplane_core.turn_text import assistant_text, user_text

from ..ledger.entry import LedgerEntry
from ..memory_service import MemoryServiceError
from .admin import Operator

KINDS = ("fact", "preference", "episode", "strategy_outcome", "constraint", "directive", "summary")
SCOPES = ("agent", "session", "global")
# keys memplane derives (episode:<entry id>, fact:<hash>…) say nothing to a person; a key a person or
# the model chose (store_memory, REST) is shown as it is. Linear: a fixed prefix, then one class.
_DERIVED = re.compile(r"(?:[a-z_]+:)?[0-9a-f]{16,}\Z")  # "fact:<hex>", a bare hash


# The inspector's name for what the memory-service client raises (one error map: memory_service/client.py).
CurateError = MemoryServiceError


def operator_name(operator: Operator | None) -> str:
    """Who the audit trail names for an inspector edit; a session by a hash, never by its cookie."""
    if operator is None:
        return "inspector"
    if operator.session_id:
        return f"inspector session {hashlib.sha256(operator.session_id.encode()).hexdigest()[:8]}"
    return f"inspector via {operator.via}"


def _when(text: Any) -> str:
    """An RFC 3339 time as a person reads it (UTC, to the minute)."""
    if not isinstance(text, str) or not text:
        return "-"
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc).strftime(
            "%Y-%m-%d %H:%M UTC")
    except ValueError:
        return text[:40]


def readable_key(m: dict[str, Any]) -> str:
    """Keyed memories by their key; episodes and derived memories by when they were said."""
    key = str(m.get("key") or "")
    if m.get("type") == "episode" or key.startswith("episode:") or _DERIVED.match(key):
        said = m.get("said_at") or m.get("created_at")
        return f"{m.get('type') or 'memory'} said {_when(said)}"
    return key


def view(m: dict[str, Any]) -> dict[str, Any]:
    """A memory as the inspector shows it."""
    meta = m.get("metadata") if isinstance(m.get("metadata"), dict) else {}
    return {**m, "readable_key": readable_key(m), "created": _when(m.get("created_at")),
            "said": _when(m.get("said_at")) if m.get("said_at") else "-",
            "expires": _when(m.get("expires_at")) if m.get("expires_at") else "never",
            "pinned": meta.get("pinned") is True, "superseded": bool(meta.get("superseded_by")),
            "author": meta.get("author"), "sources": [str(e) for e in (m.get("source_entry_ids") or [])][:20]}


def audit_view(e: dict[str, Any]) -> dict[str, Any]:
    before, after = e.get("before") or {}, e.get("after") or {}
    changed = [f for f in ("value", "importance", "expires_at", "pinned") if after and before.get(f) != after.get(f)]
    return {**e, "when": _when(e.get("at")), "changed": changed, "before": before, "after": after}


def find_entry(ledger: Any, agent_id: str, entry_id: str) -> LedgerEntry | None:
    """The ledger entry with this id (blocking: run it on a thread), or None."""
    for ref in ledger.read(agent_id):
        if ref.entry.get("id") == entry_id:
            return ref.entry
    return None


def conversation(entry: LedgerEntry) -> dict[str, str]:
    """What the user said in a turn and what the agent was answered."""
    return {"user": user_text(entry), "assistant": assistant_text(entry), "ts": str(entry.get("ts") or ""),
            "turn_id": str(entry.get("turn_id") or ""), "id": str(entry.get("id") or "")}


_ID_PREFIX = re.compile(r"(turn_|mem_|[a-z_]+:)?")  # what says what an id is: kept before the short part


def short_id(value: Any, keep: int = 10) -> str:
    """A long id (a 64-character hash, a turn id) as its first characters: enough to tell ids apart."""
    text = str(value or "")
    head = _ID_PREFIX.match(text)
    prefix = head.group(0) if head else ""
    rest = text[len(prefix):]
    return text if len(rest) <= keep + 2 else f"{prefix}{rest[:keep]}…"


def id_html(value: Any) -> Markup:
    """A short id, the whole one in its tooltip (Jinja filter `id`). A screen reader reads the short
    one too (the title is its description, not 64 characters read aloud)."""
    text = str(value or "")
    shown = short_id(text)
    if shown == text:
        return Markup('<span class="id">{}</span>').format(text)
    return Markup('<span class="id" title="{}">{}</span>').format(text, shown)


def _epoch(text: Any) -> float | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def memory_stats(memories: list[dict[str, Any]]) -> dict[str, Any]:
    """What the agent page draws from a listing: counts by kind, creation times, the curator's work."""
    by_kind: dict[str, int] = {}
    created: list[float] = []
    curated, superseded = [], []
    for m in memories:
        by_kind[str(m.get("type") or "memory")] = by_kind.get(str(m.get("type") or "memory"), 0) + 1
        if (at := _epoch(m.get("created_at"))) is not None:
            created.append(at)
        meta = m.get("metadata") if isinstance(m.get("metadata"), dict) else {}
        if meta.get("curator"):
            curated.append(m)
        if meta.get("superseded_by"):
            superseded.append(m)
    newest = lambda ms: sorted(ms, key=lambda m: str(m.get("created_at") or ""), reverse=True)  # noqa: E731
    return {"total": len(memories), "by_kind": by_kind, "created": created,
            "curated": [view(m) for m in newest(curated)[:8]], "curated_total": len(curated),
            "superseded": [view(m) for m in newest(superseded)[:8]], "superseded_total": len(superseded)}
