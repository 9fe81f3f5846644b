"""Turn a ledger entry into memories: an episode with the user's own words, plus explicit
statements worth keeping ("remember that…", "I prefer…", "never…") as facts, preferences
and constraints. Long turns are split into sentences, not truncated, so a fact at the end
of a long turn is still findable.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime, timezone
from typing import Any

from ..turn_text import session_of, user_text
from .lexical import terms
from .model import Memory

EPISODE_CHARS = 600
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'])|\n+")
_RULES: tuple[tuple[str, float, re.Pattern[str]], ...] = (
    ("constraint", 0.8, re.compile(r"^(?:please\s+)?(?:never|always|don't ever|do not ever|you must|must not|"
                                   r"make sure (?:to|you)|avoid)\b", re.I)),
    ("preference", 0.7, re.compile(r"\b(?:i|we)\s+(?:really\s+)?(?:prefer|like|love|enjoy|hate|dislike|"
                                   r"can't stand|don't like|do not like|want you to|favou?rite)\b|"
                                   r"\bmy favou?rite\b", re.I)),
    ("fact", 0.7, re.compile(r"^(?:please\s+)?(?:remember|note|keep in mind|don't forget|fyi)\b(?:\s+that)?", re.I)),
)
_DATE_PATTERNS = (
    (re.compile(r"\b(\d{4}-\d{2}-\d{2})(?:[ T](\d{2}:\d{2}))?"), ("%Y-%m-%d",)),
    (re.compile(r"\b(\d{1,2} (?:January|February|March|April|May|June|July|August|September|October|November|"
                r"December),? \d{4})", re.I), ("%d %B %Y", "%d %B, %Y")),
    (re.compile(r"\b((?:January|February|March|April|May|June|July|August|September|October|November|December)"
                r" \d{1,2},? \d{4})", re.I), ("%B %d, %Y", "%B %d %Y")),
)
_SESSION_DATE_HINT = re.compile(r"(?:today is|current date|date:|session date|\bon\b)", re.I)


def sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s and s.strip()]


def chunks(text: str, limit: int = EPISODE_CHARS) -> list[str]:
    """Whole sentences packed into pieces of at most ~`limit` characters."""
    out: list[str] = []
    current = ""
    for s in sentences(text):
        if current and len(current) + 1 + len(s) > limit:
            out.append(current)
            current = s
        else:
            current = f"{current} {s}".strip()
    if current:
        out.append(current)
    return out


def _parse_date(text: str) -> float | None:
    for pattern, formats in _DATE_PATTERNS:
        m = pattern.search(text)
        if not m:
            continue
        raw = m.group(1).replace(",", ",")
        for fmt in formats:
            try:
                return datetime.strptime(raw, fmt).replace(tzinfo=timezone.utc).timestamp()
            except ValueError:
                continue
    return None


def session_date(entry: dict[str, Any]) -> float | None:
    """A date the conversation states (system prompt first), else the entry's own timestamp."""
    req = entry.get("request_original") or {}
    texts = []
    if isinstance(req, dict):
        if isinstance(req.get("system"), str):
            texts.append(req["system"])
        if isinstance(req.get("instructions"), str):
            texts.append(req["instructions"])
        for m in req.get("messages") or []:
            if isinstance(m, dict) and m.get("role") in ("system", "developer") and isinstance(m.get("content"), str):
                texts.append(m["content"])
    for t in texts:
        found = _parse_date(t)
        if found:
            return found
    ts = entry.get("ts")
    if isinstance(ts, str):
        try:
            return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def slug(text: str, words: int = 6) -> str:
    t = terms(text)[:words]
    base = "-".join(t) or "note"
    return f"{base}-{hashlib.sha256(text.lower().encode()).hexdigest()[:8]}"


def memories_from_entry(agent_id: str, entry: dict[str, Any], metadata: dict[str, Any]) -> list[Memory]:
    eid = entry["id"]
    said = session_date(entry)
    session_id = session_of(entry, metadata)
    meta = {"session_id": session_id} if session_id else {}
    user = " ".join(user_text(entry).split()) if user_text(entry) else ""
    if not user or not terms(user):
        return []  # nothing the user said: an assistant's "OK." is not a memory
    out: list[Memory] = []
    pieces = chunks(user)
    for n, piece in enumerate(pieces):
        key = f"episode:{eid}" if len(pieces) == 1 else f"episode:{eid}:{n}"
        out.append(Memory(agent_id=agent_id, scope="agent", key=key, value=piece, type="episode",
                          importance=0.5, said_at=said, metadata=dict(meta), source_entry_ids=[eid]))
    for s in sentences(user):
        for kind, importance, rule in _RULES:
            if rule.search(s):
                text = s
                if kind == "fact":
                    text = rule.sub("", s).strip(" ,:") or s
                    text = text[0].upper() + text[1:]
                out.append(Memory(agent_id=agent_id, scope="agent", key=f"{kind}:{slug(text)}", value=text,
                                  type=kind, importance=importance, said_at=said, metadata=dict(meta),
                                  source_entry_ids=[eid]))
                break
    return out
