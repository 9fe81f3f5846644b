"""The person's words, found: client scaffolding is set aside from the recall query and from what
is retained.

Coding agents wrap their own context around the person's request: Claude Code sends the request as
the last of ~9 text blocks of one user message, the eight before it `<system-reminder>` blocks
(environment, skills list, token budget, date); Codex sends `<environment_context>` and
`<user_instructions>` as messages of their own; IDE plugins add `<ide_selection>` blocks. Read as
the person's words, that text became the recall query and most of every stored memory. Two
generic rules recognise it, not one client's strings:

* tagged — a text part (or a message's whole string content) that is wholly wrapped in one
  context tag: `<name …>…</name>` where `name` is snake_ or kebab-case (`system-reminder`,
  `environment_context`, `user_instructions`, `ide_selection`, `command-name`) or one of a few
  plain context words (`context`, `instructions`, `env`, `reminder`, `system`). HTML and the markup people
  paste use plain names, so `<div>…</div>` stays the person's.
* recurring — a text part of at least `RECUR_MIN_CHARS` that the same agent has sent verbatim in
  `RECUR_SESSIONS` different sessions (a client's fixed preamble that carries no tag). The newest
  message's last text part is never set aside by this rule: that is the request itself, and a
  person may well ask the same thing every morning.

* echoes the system prompt — a paragraph (≥ `ECHO_MIN_CHARS`) of a user text part that the same
  request's system text carries verbatim: a client that appends its rules to the person's message
  (a reminder of its edit format after the request) repeats them from its system prompt, and a
  person does not retype the system prompt. Only those paragraphs go; the rest of the part stays.
  Read in the newest user message only (where such rules are appended, and what the query and
  the memory take), so a long conversation costs no more per call.

A compaction summary ("This session is being continued from a previous conversation…") is the
session's own memory and is never set aside. The decision is recorded on the turn's ledger line
(`scaffolding.recurring`, the digests of recurring parts), so retain — live or backfilled — sets
aside exactly what recall did (`for_memory.py`).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson
import re2
from cachetools import LRUCache

from memplane_core.memo import TextMemo
from memplane_core.session_key import session_key
from memplane_core.turn_text import latest_user_index, text_of

RECUR_SESSIONS = 3  # sessions that sent a part verbatim before it counts as scaffolding
RECUR_MIN_CHARS = 64  # shorter parts ("run the tests") are too likely to be the person's own words
RECUR_MAX_PARTS = 200_000  # (agent, digest) pairs remembered, least recently seen first out
TEXT_TYPES = ("text", "input_text")
# `system`: a user turn wholly wrapped in `<system>…</system>` is the client's own note to the model (a
# nudge after an answer without a tool call), never the person's words
PLAIN_CONTEXT_TAGS = frozenset({"context", "instructions", "env", "environment", "reminder", "system"})
COMPACTION_LEAD = "This session is being continued from a previous conversation"
ECHO_MIN_CHARS = 40  # a shorter paragraph ("Done.", a file name) may well be in a system prompt by chance

_OPENER = re2.compile(r"^<([A-Za-z][A-Za-z0-9_.:-]{0,63})(?:\s[^<>]{0,512})?>")


# a wrapped text part -> its tag (clients resend the same parts every call)
_TAGS: TextMemo[str | None] = TextMemo(chars=2_000_000, key_chars=500_000)
_UNKNOWN = object()


def context_tag(text: str) -> str | None:
    """The context tag that wholly wraps `text`, or None (see the module docstring)."""
    tag = _TAGS.get(text, _UNKNOWN)
    if tag is not _UNKNOWN:
        return tag  # type: ignore[return-value]
    tag = _context_tag(text)
    if tag is not None or text.lstrip().startswith("<"):  # only what needed the pattern is kept
        _TAGS.put(text, tag)
    return tag


def _context_tag(text: str) -> str | None:
    body = text.strip()
    if not body.startswith("<") or not body.endswith(">"):
        return None
    m = _OPENER.match(body[:600])
    if m is None:
        return None
    name = m.group(1)
    if not body.endswith(f"</{name}>"):
        return None
    if "_" in name or "-" in name or name.lower() in PLAIN_CONTEXT_TAGS:
        return name
    return None


def is_compaction_summary(text: str) -> bool:
    return text.lstrip().startswith(COMPACTION_LEAD)


_DIGESTS: TextMemo[str] = TextMemo(chars=4_000_000, key_chars=1_000_000)  # texts a turn digests again and again


def digest(text: str) -> str:
    """A text part's name for recurrence and for the ledger's `scaffolding.recurring`. Remembered
    (bounded by characters): a call digests each long user part up to five times (recurrence,
    its check, the set-aside list, the sifting, retain's sifting), and agents resend every part on
    every call — hashing the whole history again each time grew with the conversation."""
    hit = _DIGESTS.get(text)
    if hit is None:
        hit = hashlib.sha256(text.strip().encode()).hexdigest()[:20]
        _DIGESTS.put(text, hit)
    return hit


@dataclass
class SetAside:
    """What one request's scaffolding was: parts and characters set aside, by rule and tag."""

    parts: int = 0
    chars: int = 0
    by_rule: Counter[str] = field(default_factory=Counter)  # tagged | recurring
    tags: Counter[str] = field(default_factory=Counter)
    recurring: list[str] = field(default_factory=list)  # digests the recurring rule matched

    def add(self, rule: str, text: str, tag: str | None = None) -> None:
        self.parts += 1
        self.chars += len(text)
        self.by_rule[rule] += 1
        if tag:
            self.tags[tag] += 1

    def as_dict(self) -> dict[str, Any]:
        return {"parts": self.parts, "chars": self.chars, "by_rule": dict(self.by_rule), "tags": dict(self.tags)}


class Recurrence:
    """Which long text parts an agent has sent in several sessions (bounded, in memory: after a
    restart a preamble counts again from its next sessions; tagged scaffolding needs no history)."""

    def __init__(self, max_parts: int = RECUR_MAX_PARTS, sessions: int = RECUR_SESSIONS) -> None:
        self._seen: LRUCache[tuple[str, str], frozenset[str]] = LRUCache(maxsize=max_parts)
        self.sessions = sessions

    def observe(self, agent_id: str, session: str, texts: list[str]) -> None:
        for text in texts:
            if len(text.strip()) < RECUR_MIN_CHARS:
                continue
            key = (agent_id, digest(text))
            seen = self._seen.get(key, frozenset())
            if session not in seen and len(seen) < self.sessions:
                self._seen[key] = seen | {session}

    def of(self, agent_id: str) -> Callable[[str], bool]:
        """Whether a text part recurs for this agent (seen in enough sessions)."""
        def recurring(text: str) -> bool:
            s = self._seen.get((agent_id, digest(text)))
            return s is not None and len(s) >= self.sessions
        return recurring


def named_session(headers: Any, body: dict[str, Any], session_id: str | None) -> str | None:
    """The session id the client names, if any: memplane's `X-Session-Id`, `metadata.session_id`, a
    `…_session_<id>` tail of `metadata.user_id`, a `session_id` / `conversation_id` header or one
    ending in `-session-id`. Read by shape: any client that names its session one of these ways is
    grouped by it. Not `prompt_cache_key`: OpenAI's guidance is one key for requests sharing a
    prefix, which an app may well share across every user and conversation — read as one session,
    an app routing some calls to another model lost their memory (`model-unlike-session`). A long
    id is named by its digest (`session_key`): the books that keep sessions are bounded by entries,
    not bytes."""
    named = _named_session(headers, body, session_id)
    return session_key(named) if named else None


def _named_session(headers: Any, body: dict[str, Any], session_id: str | None) -> str | None:
    if session_id:
        return session_id
    meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
    user = meta.get("user_id")
    if isinstance(user, str) and "_session_" in user:
        return user.rsplit("_session_", 1)[1]
    if headers is not None:
        for name in ("session_id", "session-id", "conversation_id", "conversation-id"):
            value = headers.get(name)
            if value:
                return value
        for name, value in headers.items():
            if value and name.lower().endswith(("-session-id", "_session_id")):
                return value
    return None  # not `prompt_cache_key`: a cache bucket an app may share across all its conversations


def session_of_request(headers: Any, body: dict[str, Any], session_id: str | None) -> str:
    """Which client session a request belongs to, for counting sessions: the session the client
    names (`named_session`), else the conversation's first message (a new session starts a new
    conversation)."""
    named = named_session(headers, body, session_id)
    if named:
        return named
    items = body.get("messages") if isinstance(body.get("messages"), list) else body.get("input")
    first = items[0] if isinstance(items, list) and items else items
    return digest(orjson.dumps(first, option=orjson.OPT_SORT_KEYS).decode())


def _is_message(m: Any) -> bool:
    return isinstance(m, dict) and m.get("role") in ("user", "developer", "system") and \
        m.get("type", "message") == "message"


def user_texts(messages: list[Any]) -> list[str]:
    """Every text part of the user messages, in order (what recurrence watches)."""
    out: list[str] = []
    for m in messages:
        if not (_is_message(m) and m.get("role") == "user"):
            continue
        content = m.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out += [p["text"] for p in content if isinstance(p, dict) and p.get("type") in TEXT_TYPES
                    and isinstance(p.get("text"), str)]
    return out


def system_text(body: dict[str, Any]) -> str:
    """The request's system text: `system`, `instructions`, and its system and developer messages."""
    system = body.get("system")
    texts = [system if isinstance(system, str) else text_of(system)]
    if isinstance(body.get("instructions"), str):
        texts.append(body["instructions"])
    items = body.get("messages") if isinstance(body.get("messages"), list) else body.get("input")
    for m in items if isinstance(items, list) else ():
        if isinstance(m, dict) and m.get("role") in ("system", "developer"):
            texts.append(text_of(m.get("content")))
    return "\n".join(t for t in texts if t)


def without_echoes(text: str, system: str) -> str:
    """`text` without its paragraphs the system text carries verbatim (see the module docstring)."""
    if not system or "\n\n" not in text:
        return text
    paragraphs = text.split("\n\n")
    inside = [bool(p.strip()) and p.strip() in system for p in paragraphs]
    echo = [e and len(p.strip()) >= ECHO_MIN_CHARS for p, e in zip(paragraphs, inside)]
    if not any(echo):
        return text
    for order in (range(len(echo)), range(len(echo) - 1, -1, -1)):  # a short heading beside an echo goes too
        for i in order:
            if inside[i] and not echo[i] and any(0 <= j < len(echo) and echo[j] for j in (i - 1, i + 1)):
                echo[i] = True
    return "\n\n".join(p for p, e in zip(paragraphs, echo) if not e).strip()


def sift_messages(messages: list[Any], recurring: Callable[[str], bool] | None = None, system: str = ""
                  ) -> tuple[list[Any], SetAside]:
    """The messages with scaffolding parts set aside (a message left with nothing is left out);
    `recurring` says which long parts the recurring rule applies to; `system` is the request's
    system text (paragraphs that echo it are set aside)."""
    aside = SetAside()
    newest = latest_user_index(messages, skip_tool_results=True)
    out: list[Any] = []
    for i, m in enumerate(messages):
        if not (_is_message(m) and m.get("role") == "user"):
            out.append(m)
            continue
        content = m.get("content")
        if isinstance(content, str):
            parts: list[Any] = [{"type": "text", "text": content}]
        elif isinstance(content, list):
            parts = content
        else:
            out.append(m)
            continue
        texts = [n for n, p in enumerate(parts) if isinstance(p, dict) and p.get("type") in TEXT_TYPES]
        request_part = texts[-1] if i == newest and texts else None
        kept = []
        trimmed_any = False
        for n, p in enumerate(parts):
            text = p.get("text") if isinstance(p, dict) and p.get("type") in TEXT_TYPES else None
            if not isinstance(text, str) or is_compaction_summary(text):
                kept.append(p)
                continue
            tag = context_tag(text)
            if tag is not None:
                aside.add("tagged", text, tag)
                continue
            if n != request_part and recurring is not None and len(text.strip()) >= RECUR_MIN_CHARS \
                    and recurring(text):
                aside.add("recurring", text)
                aside.recurring.append(digest(text))
                continue
            trimmed = without_echoes(text, system) if i == newest else text  # the request: one message a call
            if trimmed != text:
                aside.add("echoes-system", text[len(trimmed):] if text.startswith(trimmed) else text)
                if trimmed:
                    kept.append({**p, "text": trimmed})
                    trimmed_any = True
                continue
            kept.append(p)
        if len(kept) == len(parts) and not trimmed_any:
            out.append(m)
        elif kept:
            out.append({**m, "content": trimmed if trimmed_any and isinstance(content, str) and len(kept) == 1
                        else kept})
    return out, aside


def sift_body(body: dict[str, Any], recurring: Callable[[str], bool] | None = None
              ) -> tuple[dict[str, Any], SetAside]:
    """`sift_messages` over a request body of any wire format (`messages`, or Responses `input`)."""
    key = "messages" if isinstance(body.get("messages"), list) else "input"
    items = body.get(key)
    if isinstance(items, str):
        items = [{"role": "user", "content": items}]
    if not isinstance(items, list):
        return body, SetAside()
    sifted, aside = sift_messages(items, recurring, system_text(body))
    return ({**body, key: sifted} if aside.parts else body), aside
