"""A retained turn becomes one episode: what was said, by whom, when, in which session.

Conversations are remembered as they were said, turn by turn: on real long conversations plain
retrieval over raw turns beats summaries and extracted facts (bench/results/HISTORY.md, "LoCoMo"), and a
turn's neighbours carry the context that a single sentence leaves out.
"""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from typing import Any

from memplane_core.instants import epoch_or_none
from memplane_core.redact import Redactor
from memplane_core.turn_text import assistant_text, bounded_query, calls_tools, session_of, tool_steps, user_text

from .dates import dated
from .record import StoredMemory
from .replies import stated

PIECE_CHARS = 600  # a long turn is kept whole, as several pieces of whole sentences
ASSISTANT_MAX_CHARS = 400
_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'])|\n+")
_CONTENT = re.compile(r"[A-Za-z]{3,}")
_ACK_WORDS = frozenset("okay noted sure got thanks thank you will done the that this".split())


def _informative(text: str) -> bool:
    """An assistant reply worth remembering says something: 'OK.' or 'Noted, thanks!' does not."""
    words = [w.lower() for w in _CONTENT.findall(text)]
    return sum(1 for w in words if w not in _ACK_WORDS) >= 3


def sentences(text: str) -> list[str]:
    """The text's sentences, whitespace collapsed (a line break ends one too)."""
    return [" ".join(s.split()) for s in _SENTENCE.split(text) if s and s.strip()]


def pieces(text: str, limit: int = PIECE_CHARS) -> list[str]:
    """Whole sentences packed into pieces of at most ~`limit` characters (a longer sentence is cut)."""
    out: list[str] = []
    current = ""
    for sentence in sentences(text):
        while len(sentence) > limit:
            if current:
                out.append(current)
                current = ""
            out.append(sentence[:limit])
            sentence = sentence[limit:]
        if current and len(current) + 1 + len(sentence) > limit:
            out.append(current)
            current = sentence
        else:
            current = f"{current} {sentence}" if current else sentence
    if current:
        out.append(current)
    return out


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def episode_id(agent_id: str, entry_id: str) -> str:
    """Deterministic: retaining the same entry twice upserts the same episode."""
    return "ep_" + hashlib.sha256(f"{agent_id}\0{entry_id}".encode()).hexdigest()[:32]


_STAMP = re.compile(r"^\s*\[([^\]\n]{6,48})\]\s*")
_STAMP_FORMATS = ("%I:%M %p on %d %B, %Y", "%I:%M %p on %d %B %Y", "%I:%M %p on %B %d, %Y", "%Y-%m-%d %H:%M:%S",
                  "%Y-%m-%d %H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M", "%Y-%m-%d", "%d %B %Y", "%d %B, %Y",
                  "%B %d, %Y", "%B %d %Y", "%a, %d %b %Y %H:%M:%S", "%d %b %Y %H:%M", "%d/%m/%Y %H:%M")


# Characters that show nothing — zero-width spaces and joiners, soft hyphens, bidi controls, the
# BOM — which pasted web and chat text carries. Invisible to the model's tokenizer already, they
# still made a turn ending in "?\u200b" read as a statement (context.asks) and kept the same words
# apart where text is compared; memories keep what a reader sees.
_INVISIBLE = dict.fromkeys(map(ord, "\u00ad\u180e\u200b\u200c\u200d\u200e\u200f\u202a\u202b\u202c\u202d"
                                    "\u202e\u2060\u2061\u2062\u2063\u2064\u2066\u2067\u2068\u2069\ufeff"))


def visible(text: str) -> str:
    """`text` without the characters that show nothing (linear: one translate)."""
    return text.translate(_INVISIBLE)


def recall_query(text: str) -> str:
    """A recall's query as memories are indexed: without the leading `[time stamp]` that episodes
    keep apart from their text (the stamp's words match no memory's words). Its vector is then the
    one the turn's own episode needs, and the embedding backlog takes it from the query cache
    instead of encoding the same text again (dense.EmbeddingBacklog.embed). Bounded however it came
    (`turn_text.bounded_query`: a client may send any `query`)."""
    return bounded_query(said_stamp(visible(text))[0])


def said_stamp(text: str) -> tuple[str, str | None, float | None]:
    """Split a leading `[time stamp]` that agents and chat logs put before a message.

    Returns the text without it, the stamp as written and its time; the text unchanged when it
    has no stamp that reads as a date.
    """
    m = _STAMP.match(text)
    if not m:
        return text, None, None
    label = m.group(1).strip()
    for fmt in _STAMP_FORMATS:
        try:
            when = datetime.strptime(label, fmt)
        except ValueError:
            continue
        said = epoch_or_none(when)  # a stamp outside the range every part can convert is no stamp
        if said is None:
            break
        return text[m.end():], label, said
    return text, None, None


def _epoch(ts: Any) -> float | None:
    """The ledger's stamp; None when it does not read as a time in range."""
    if not isinstance(ts, str):
        return None
    try:
        return epoch_or_none(datetime.fromisoformat(ts.replace("Z", "+00:00")))
    except ValueError:
        return None


_ROLE_MARK = re.compile(r"^\s*(?:user|human|assistant|ai|system|developer|tool|tools|model|function)\s*:", re.I)


def unlabelled(text: str) -> str:
    """A user's piece that begins like a speaker's label ('assistant: …', 'System: …') is quoted,
    so that only the labels episodes put there themselves begin a line with one."""
    return f"> {text}" if _ROLE_MARK.match(text) else text


def said_words(entry: dict[str, Any]) -> tuple[str, str | None, float | None]:
    """The user's words of the turn, and when they begin with a `[time stamp]` (a conversation
    imported with its dates), that stamp as written and its time (`said_stamp`). Read from the
    person's own message, never from what the assistant replied or from a client's system prompt:
    a coding agent's "Today's date: 2026-11-28" says nothing about when this turn was said."""
    return said_stamp(visible(user_text(entry)))


def episode_parts(entry: dict[str, Any], user: str | None = None) -> list[tuple[str, str]]:
    """The turn's words as (origin, text) parts: the user's, in pieces (`user`), what its tools
    returned (`tool`, always a part of its own: a fetched page's words never sit in the user's
    part) and the assistant's reply when it states something (`model`; an acknowledgement or a
    question back does not, `replies.adds_fact`), as its stating sentences (`replies.stated`)
    on a line labelled 'assistant: '. The reply is always a part of its own, never merged into
    the person's, however short the turn: the person's part holds the person's words alone, so
    the reply's words neither match the person's memory to a question nor speak under their
    label, and the reply itself stays findable as the model's, bounded (memplane_core/provenance.py).
    `user`: the user's words when the caller has them already (without their stamp, `said_words`).

    A tool loop is one user turn over several calls: a call answered with tool calls is a step on
    the way; the last call (which sends the whole loop) carries the turn, once. When the proxy names
    the loop (`loop_key`) every step carries the turn under the loop's ids (`episode_key`), each
    replacing the one before: a loop that ends on a tool call whose result never goes back (an
    agent's `finish` tool, a session stopped mid-loop) keeps its latest step instead of nothing.
    Without a name a step makes no episode.
    """
    if calls_tools(entry) and episode_key(entry) == entry.get("id"):
        return []
    user = said_words(entry)[0] if user is None else user
    parts = [("user", unlabelled(p)) for p in pieces(user)]
    steps = tool_steps(entry)
    if steps:
        parts.append(("tool", "tools: " + "; ".join(steps)))
    reply = visible(assistant_text(entry))
    told = stated(reply, user, ASSISTANT_MAX_CHARS) if reply and _informative(reply) else []  # small talk is not remembered
    if told:
        parts.append(("model", "assistant: " + _clip(" ".join(told), ASSISTANT_MAX_CHARS)))
    return parts


def episode_texts(entry: dict[str, Any]) -> list[str]:
    """The texts of the turn's parts (`episode_parts`)."""
    return [text for _, text in episode_parts(entry)]


def episode_key(entry: dict[str, Any]) -> str:
    """What a turn's episodes are keyed by: the tool loop the entry is a step of (`loop_key`), so each
    step replaces the one before; else the entry itself."""
    loop = entry.get("loop_key")
    return f"loop:{loop}" if isinstance(loop, str) and loop else entry["id"]


def episodes_from_entry(agent_id: str, entry: dict[str, Any], metadata: dict[str, Any],
                        redactor: Redactor) -> list[StoredMemory]:
    """The episodes of one ledger entry (one per part), secrets redacted; none for an empty turn.
    Each carries its part's origin, and every episode of a turn whose tools returned text is
    marked `tainted` (docs/DESIGN.md, "Memory poisoning")."""
    logged_at = _epoch(entry.get("ts"))
    out = []
    user, label, said_at = said_words(entry)  # the person's stamp, else when memplane saw the turn
    parts = episode_parts(entry, user)
    tainted = any(origin == "tool" for origin, _ in parts)
    texts = [text for _, text in parts]
    key = episode_key(entry)
    for n, raw in enumerate(texts):
        text, _ = redactor.text(raw)
        if not text.strip():
            continue
        suffix = f"#{n}" if n else ""
        meta: dict[str, Any] = {"piece": n, **({"said": label} if label else {}), "origin": parts[n][0]}
        if tainted:
            meta["tainted"] = True
        m = StoredMemory(agent_id=agent_id, scope="agent", key=f"episode:{key}{suffix}", value=text,
                   type="episode", importance=0.5, session_id=session_of(entry, metadata),
                   id=episode_id(agent_id, key + suffix), said_at=said_at or logged_at,
                   source_entry_ids=[entry["id"]], metadata=meta)
        m.metadata.update(dated(text, m.said_at))  # "yesterday" as a day (dates.py)
        if logged_at is not None:
            m.created_at = m.updated_at = logged_at
        out.append(m)
    return out
