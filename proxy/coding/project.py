"""Which project a turn works in: `metadata.project` in recall and retain (CONTRACT §5).

A coding agent declares where it works, in one of a few shapes any client may use:

* the `X-Memplane-Project` header, when the operator or the person sets one;
* a repository the request names by its remote (a `git remote -v` line, `remote.origin.url=…`,
  `Git remote: URL`): `host/owner/name`, so a second clone or a worktree of the same repository
  is the same project;
* a working-directory declaration — a line `Working directory: /path` (also `Primary …`,
  `Current …`, `cwd`, `Workspace root`, `Project root`, `Repository root`, as a list item too, the
  label in Markdown emphasis too: `**Working Directory:** /path`),
  `<cwd>/path</cwd>`, `"cwd": "/path"` in JSON, "currently working in the directory: /path".

Found in the system text and the messages, in that order. What a session's main calls declared
carries to its calls that declare nothing (`reading.py`); an agent's default project
(`metadata.json` `"project"`) applies when nothing is declared. An agent whose `metadata.json` says
`"project_scope": false` never sends one.
"""

from __future__ import annotations

import posixpath
from typing import Any

import re2

from memplane_core.turn_text import text_of

HEADER = "X-Memplane-Project"
MAX_CHARS = 512
SCAN_CHARS = 200_000  # of each text: a declaration sits near the top of the client's context

_EMPHASIS = r"(?:\*{1,2}|_{1,2})?"  # a label in Markdown bold or italics: `**Working Directory:** /path`
_DECLARED = re2.compile(
    r"(?mi)(?:^[ \t]*(?:[-*][ \t]+)?" + _EMPHASIS + r"(?:(?:primary|current)[ \t]+)?(?:working[ \t]+directory|cwd|"
    r"workspace[ \t]+root|project[ \t]+root|repository[ \t]+root)(?:[ \t]*\(cwd\))?[ \t]*" + _EMPHASIS
    + r"[ \t]*[:=]" + _EMPHASIS + r"[ \t]*([^\n<]+)$"
    r"|<cwd>[ \t]*([^\n<]+)</cwd>|\"(?:cwd|working_?[dD]ir(?:ectory)?|workspace_?[rR]oot)\"[ \t]*:[ \t]*\"([^\"\n]+)\""
    r"|currently working in the directory:?[ \t]*([^\n<]+))")
# a remote: `origin  git@host:owner/name.git (fetch)`, `remote.origin.url=https://host/owner/name`, `Git remote: URL`
_REMOTE = re2.compile(r"(?mi)^[ \t]*(?:[-*][ \t]+)?(?:(?:git[ \t]+)?remote(?:\.origin\.url)?[ \t]*[:=]|origin[ \t])"
                     r"[ \t]*([^\s()<>\"']{4,300})")
_URL = re2.compile(r"^(?:[a-z][a-z0-9+.-]*://)?(?:[^@/]+@)?([A-Za-z0-9.-]+\.[A-Za-z]+)(?::\d+)?[:/]+([^?#]+)$")


def _repository(url: str) -> str | None:
    """`host/owner/name` of a remote URL (scheme, user, port and `.git` dropped), or None."""
    m = _URL.match(url)
    if m is None:
        return None
    path = m.group(2).strip("/")
    path = path[:-4] if path.endswith(".git") else path
    return f"{m.group(1).lower()}/{path}" if "/" in path else None


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


def named_repository(body: dict[str, Any]) -> str | None:
    """The repository the request names by its remote (`host/owner/name`), or None."""
    for text in _texts(body):
        text = text[:SCAN_CHARS]
        if "remote" not in text.lower() and "origin" not in text:
            continue
        for m in _REMOTE.finditer(text):
            found = _repository(m.group(1))
            if found:
                return found
    return None


_CHEAP = ("directory", "Directory", "cwd", "root", "Root", "workspace", "working")


def declared_directory(body: dict[str, Any]) -> str | None:
    """The working directory the client declared in this request, normalised, or None."""
    for text in _texts(body):
        text = text[:SCAN_CHARS]
        if not any(word in text for word in _CHEAP):  # every declaration names one: a cheap test first
            continue
        m = _DECLARED.search(text)
        if m is not None:
            found = next((g for g in m.groups() if g), None)
            if found:
                return normalise(found)
    return None


def project_of(headers: Any, body: dict[str, Any], enabled: bool = True) -> str | None:
    """The turn's project as this request declares it: the header, else the repository it names by
    its remote, else the declared working directory; None when the agent's project scope is off or
    nothing is declared."""
    if not enabled:
        return None
    named = headers.get(HEADER) if headers is not None else None
    if named and named.strip():
        return normalise(named)
    return named_repository(body) or declared_directory(body)
