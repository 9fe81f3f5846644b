"""What the proxy agrees to forward: exact paths and the operator's pass-through allow-list.

Every model call must be a recorded turn, so a path that could be read two ways (dot segments,
empty segments, percent-encoded separators or dots) is refused before anything else, and only the
three turn endpoints plus the operator's allow-list reach a provider with the operator's key.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import ProxyError

DEFAULT_PASSTHROUGH = ("GET /v1/models", "GET /v1/models/{id}", "POST /v1/embeddings",
                       "POST /v1/messages/count_tokens", "POST /v1/moderations")
# Encoded `/`, `\\`, `.`: separators and dot segments in disguise. Encoded `%`, `?`, `#` and control
# characters: decoded once, they would read as another escape, a query or a fragment upstream.
_ENCODED = re.compile(r"%(2f|5c|2e|25|3f|23|[01][0-9a-f]|7f)", re.I)


def check_raw_path(raw_path: str) -> None:
    """400 for a path that is not exactly what it says: `.`/`..` or empty segments, `\\`, or a
    percent-encoded `/`, `\\`, `.`, `%`, `?`, `#` or control character."""
    path = raw_path.split("?", 1)[0].split("#", 1)[0]
    if _ENCODED.search(path) or "\\" in path or not path.startswith("/"):
        raise ProxyError(400, "The request path holds an encoded separator, dot, '%', '?', '#' or control "
                              "character; send the plain path.", code="invalid_path")
    segments = path[1:].split("/")
    if segments[-1] == "" and not path.startswith("/v1/"):
        segments.pop()  # the operator's pages end in "/" (/memplane/ui/); nothing outside /v1/ is forwarded
    if path != "/" and any(s in ("", ".", "..") for s in segments):
        raise ProxyError(400, "The request path holds empty or dot segments; send the plain path.",
                         code="invalid_path")


@dataclass(frozen=True)
class Rule:
    method: str
    pattern: re.Pattern[str]
    text: str


def parse_allow_list(spec: str | list[str] | tuple[str, ...] | None) -> tuple[Rule, ...]:
    """`METHOD /v1/path` entries (comma-separated or a list); `{name}` matches one path segment,
    `*` as the method matches any. Only paths under /v1/ are accepted."""
    if spec is None:
        entries = list(DEFAULT_PASSTHROUGH)
    elif isinstance(spec, str):
        entries = [e.strip() for e in spec.split(",") if e.strip()]
    else:
        entries = [str(e).strip() for e in spec if str(e).strip()]
    rules = []
    for entry in entries:
        parts = entry.split()
        if len(parts) != 2 or not parts[1].startswith("/v1/"):
            raise ValueError(f"pass-through entry {entry!r}: expected 'METHOD /v1/path'")
        method, path = parts[0].upper(), parts[1].rstrip("/")
        regex = "".join("[^/]+" if re.fullmatch(r"\{[^/{}]+\}", seg) else re.escape(seg)
                        for seg in re.split(r"(\{[^/{}]+\})", path))
        rules.append(Rule(method, re.compile(f"^{regex}$"), entry))
    return tuple(rules)


def allowed(rules: tuple[Rule, ...], method: str, path: str) -> bool:
    return any((r.method in ("*", method)) and r.pattern.fullmatch(path) for r in rules)


def require_model_allowed(allowed_models: tuple[str, ...], model: object) -> None:
    """403 when the agent names a model outside its `allowed_models` (an empty list allows any)."""
    if allowed_models and model is not None and model not in allowed_models:
        raise ProxyError(403, f"Model {model!r} is not allowed for this agent.", code="model_not_allowed",
                         param="model")
