"""Which project a turn works in: `metadata.project` in recall and retain (CONTRACT §5).

A coding agent declares where it works: the `X-Memplane-Project` header when the operator or the
person sets one, else the working directory the client writes into its context — Claude Code's
environment text (`Working directory: /path`, ` - Primary working directory: /path` as a list item), Codex's
`<cwd>/path</cwd>` in `<environment_context>`, Gemini-family clients' (Qwen Code's) "I'm currently
working in the directory: /path". Found in the system text and the messages, in that order.
An agent whose `metadata.json` says `"project_scope": false` never sends one.
"""

from __future__ import annotations

import posixpath
from typing import Any

import re2

from memplane_core.turn_text import text_of

HEADER = "X-Memplane-Project"
MAX_CHARS = 512
SCAN_CHARS = 200_000  # of each text: a declaration sits near the top of the client's context

_DECLARED = re2.compile(
    r"(?m)(?:^[ \t]*(?:[-*][ \t]+)?(?:Primary working directory|Current working directory|Working directory|cwd)[ \t]*:[ \t]*"
    r"([^\n<]{1,512})$|<cwd>[ \t]*([^\n<]{1,512})</cwd>|currently working in the directory:?[ \t]*([^\n<]{1,512}))")


def normalise(raw: str) -> str | None:
    """A project name as memory keeps it: one line, a path without `.`/`..` steps or a trailing `/`."""
    value = " ".join(raw.split())[:MAX_CHARS].strip().strip("`'\"").rstrip(".")
    if not value:
        return None
    if value.startswith("/") or value.startswith("~"):
        value = posixpath.normpath(value)
    return value or None


def _texts(body: dict[str, Any]) -> list[str]:
    out: list[str] = []
    system = body.get("system")
    if isinstance(system, str):
        out.append(system)
    elif isinstance(system, list):
        out.append(text_of(system))
    if isinstance(body.get("instructions"), str):
        out.append(body["instructions"])
    items = body.get("messages") if isinstance(body.get("messages"), list) else body.get("input")
    if isinstance(items, str):
        out.append(items)
    elif isinstance(items, list):
        for m in items:
            if isinstance(m, dict) and m.get("role") in ("system", "developer", "user"):
                out.append(text_of(m.get("content")))
    return out


def declared_directory(body: dict[str, Any]) -> str | None:
    """The working directory the client declared in this request, normalised, or None."""
    for text in _texts(body):
        text = text[:SCAN_CHARS]
        if "directory" not in text and "cwd" not in text:  # every declaration names one: a cheap test first
            continue
        m = _DECLARED.search(text)
        if m is not None:
            found = next((g for g in m.groups() if g), None)
            if found:
                return normalise(found)
    return None


def project_of(headers: Any, body: dict[str, Any], enabled: bool = True) -> str | None:
    """The turn's project: the header, else the declared working directory; None when the agent's
    project scope is off or nothing is declared."""
    if not enabled:
        return None
    named = headers.get(HEADER) if headers is not None else None
    if named and named.strip():
        return normalise(named)
    return declared_directory(body)
