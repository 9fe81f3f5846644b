"""What the proxy agrees to forward: exact paths and the operator's pass-through allow-list.

Every model call must be a recorded turn, so a path that could be read two ways (dot segments,
empty segments, percent-encoded separators or dots) is refused before anything else, and only the
three turn endpoints plus the operator's allow-list reach a provider with the operator's key.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from email import policy
from email.parser import BytesParser
from typing import Any

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


class _DuplicateKey(ValueError):
    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _DuplicateKey(key)
        seen.add(key)
    return dict(pairs)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def strict_json(body: bytes) -> Any:
    """The body as the provider must read it too: UTF-8, RFC 8259, no key twice in any object.
    A pass-through body is forwarded byte for byte, so a reading the provider could make
    differently (which of two `model`s counts, a BOM, NaN) is refused instead of checked one way."""
    try:
        return json.loads(body.decode("utf-8"), object_pairs_hook=_unique_keys, parse_constant=_no_constant)
    except _DuplicateKey as exc:
        raise ProxyError(400, f"The request body names {exc.key!r} more than once in one object.",
                         code="duplicate_key", param=exc.key) from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, too many digits
        raise ProxyError(400, f"The request body is not valid JSON ({type(exc).__name__}).",
                         code="invalid_json") from None


def _form_models(content_type: str, body: bytes) -> list[str]:
    """The `model` fields of a multipart/form-data body (the stdlib MIME parser: linear, and the
    body is already within `max_body_bytes`)."""
    doc = BytesParser(policy=policy.HTTP).parsebytes(b"Content-Type: " + content_type.encode("latin-1")
                                                     + b"\r\n\r\n" + body)
    if not doc.is_multipart():
        raise ProxyError(400, "The multipart request body could not be read.", code="invalid_body")
    # the raw text (no transfer-decoding, no stripping): what a provider's form parser reads
    return [str(part.get_payload()) for part in doc.iter_parts()
            if part.get_param("name", header="content-disposition") == "model"]


def check_passthrough_body(allowed_models: tuple[str, ...], content_type: str, content_type_header: str,
                           body: bytes) -> None:
    """A pass-through body is JSON (checked strictly, whatever it claims) or a multipart upload
    (its `model` field checked when the agent has `allowed_models`); any other type is 415, since
    the provider might read it as JSON without the proxy having checked it."""
    if not body:
        return
    if content_type == "multipart/form-data":
        if allowed_models:
            models = _form_models(content_type_header, body)
            if len(models) > 1:
                raise ProxyError(400, "The form names 'model' more than once.", code="duplicate_key", param="model")
            require_model_allowed(allowed_models, models[0] if models else None)
        return
    if content_type != "application/json":
        raise ProxyError(415, f"Content-Type {content_type or '(none)'!r} is not accepted here; send "
                              "application/json (or multipart/form-data for an upload).",
                         code="unsupported_media_type")
    doc = strict_json(body)
    if isinstance(doc, dict):
        require_model_allowed(allowed_models, doc.get("model"))
