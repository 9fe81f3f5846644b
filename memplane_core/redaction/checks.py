"""Is a matched value really a secret? Placeholders, code that names a secret, and random-looking
strings told apart. Every pattern here is RE2, so checks stay linear on any input."""

from __future__ import annotations

import base64
import json
import math
from collections import Counter

import re2

REDACTED_PREFIX = "[redacted:"

_PLACEHOLDER_WORDS = (
    "your", "example", "placeholder", "changeme", "change_me", "change-me", "dummy",
    "redacted", "xxxx", "****", "...", "<", ">", "${", "{{", "%(", "insert", "replace",
    "fake", "sample", "notreal", "not-real", "not_real",
)
_PLACEHOLDER_VALUES = {
    "password", "passwd", "secret", "token", "none", "null", "true", "false", "empty",
    "string", "test", "admin", "pass", "hidden", "unset", "todo", "tbd", "n/a",
}

_TEMPLATE = re2.compile(r"(?s)^(?:<[^<>]*>|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\{\{.*\}\}|%\(\w+\)s|\[redacted:[a-z0-9_]+\]|"
                        r"\{[A-Za-z_][A-Za-z0-9_.]*\}|%[sd])$")  # ..., `{password}` / `%s`: a format string's slot
_WORDS_ONLY = re2.compile(r"^[A-Za-z_\-]+$")
_VENDOR_PREFIX = re2.compile(r"^[a-z]+[-_]")
# Code that reads a secret from elsewhere rather than holding one: os.environ[...], getpass(),
# config.db_password, self.token.
_CODE_REFERENCE = re2.compile(
    r"^(?:(?:os|process|sys|env|environ|config|settings|secrets|vault|self|this|ctx|app|params|args|opts|"
    r"options|request|req|cfg|conf)\b|[A-Za-z_$][\w$]*\(|[a-z_$][a-z0-9_$]*(?:\.[A-Za-z_$][\w$]*)+\(?$)")
# A value that only names where the secret lives: an environment variable (DB_PASSWORD), a shell
# substitution ($(cat /run/secrets/db)), a path, a Kubernetes secretKeyRef name (my-db-credentials).
_REFERENCE = re2.compile(
    r"^(?:\$\(|`|\$[A-Za-z_{]|%[A-Za-z_]|@[A-Za-z_]|/|~/|\./|file:|env:|vault:|secretsmanager:|arn:|"
    r"[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+$|![A-Za-z]+$|ENC\[)")  # `!vault …`: a YAML tag; `ENC[…]`: a SOPS-encrypted value
# lower-case or camelCase names that mention what they name (db-credentials, openai_api_key, dbPassword)
_NAMED = re2.compile(r"^(?:[a-z][a-z0-9]*(?:[-_.][a-z0-9]+)+|[a-z]+(?:[A-Z][a-z0-9]*)+)$")
_SECRET_WORD = re2.compile(r"(?i)pass|pwd|secret|token|key|cred|auth|cert")
_PATH = re2.compile(r"^[a-z0-9_.\-]+(?:/[a-z0-9_.\-]+){2,}$")  # a lower-case relative path (detect-secrets: 3+ `/`)
_IDENTIFIER = re2.compile(r"^[A-Za-z_][A-Za-z_.]*$")


def shannon_entropy(value: str) -> float:
    if not value:
        return 0.0
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def looks_placeholder(value: str) -> bool:
    """True for values that only stand in for a secret: `sk-...`, `<YOUR_KEY>`, `xxxx`, `${VAR}`,
    `your-api-key-here`. A real secret that happens to contain a word such as "example" is not
    one: only values with no digits or symbols beyond separators count as words."""
    v = value.strip().strip("\"'")
    low = v.lower()
    if not v or low.startswith(REDACTED_PREFIX) or low in _PLACEHOLDER_VALUES or low.rstrip(">)]}") in _PLACEHOLDER_VALUES:
        return True
    if _TEMPLATE.search(v) or "..." in v or "…" in v or "****" in v or "xxxx" in low:
        return True
    # a template stands in for the whole value (`${DB_PASS}`, `{{ .Values.pw }}`, `<token>`); a
    # value that merely contains such characters (`m{{h}o)p${e]…`) is not one — detect-secrets' rule
    if v.startswith(("${", "{{", "%(", "<", "$(", "#{")) or (v.startswith("{") and v.endswith("}}")):
        return True
    if v.startswith("[") and v.endswith("]") and _WORDS_ONLY.search(v[1:-1]):
        return True  # `[PASSWORD]`, `[YOUR_TOKEN]`: a bracketed name is a slot to fill in
    if _WORDS_ONLY.search(v) and any(word in low for word in _PLACEHOLDER_WORDS):
        return True
    core = _VENDOR_PREFIX.sub("", low, count=1)  # drop a vendor prefix such as sk- or ghp_
    return len(set(core.replace("-", "").replace("_", ""))) <= 2


def looks_reference(value: str) -> bool:
    """True for a value that names a secret without holding it (see _REFERENCE)."""
    v = value.strip().strip("\"'`")
    if _REFERENCE.search(v) or _CODE_REFERENCE.search(v) or _PATH.search(v):
        return True
    return bool(_NAMED.search(v) and _SECRET_WORD.search(v))


def random_enough(value: str, min_entropy: float = 3.0) -> bool:
    return not looks_placeholder(value) and shannon_entropy(value) >= min_entropy


def assignment_check(value: str) -> bool:
    """A value worth redacting: not a placeholder, not code or a name that points at the secret
    (`os.environ[...]`, `getpass()`, `$(cat …)`, `DB_PASSWORD`), not a comment."""
    if looks_placeholder(value) or value.startswith(("#", "//", "(")) or looks_reference(value):
        return False  # `(` opens a cast or a call: `setApiKey:(NSString *)apiKey`
    bare = value.rstrip(")]};,")
    if bare != value and "(" not in value and (looks_placeholder(bare) or _IDENTIFIER.search(bare)):
        return False  # a call's argument (`password=password)`), not a value
    return len(value) >= 6 and shannon_entropy(value) >= 2.5


def bearer_check(value: str) -> bool:
    """A bearer credential is long and random; prose ('Bearer authentication') is neither."""
    token = value.split(":", 1)[-1]
    if looks_placeholder(value) or len(token) < 16:
        return False
    return any(c.isdigit() for c in token) or shannon_entropy(token) >= 3.5


def jwt_check(value: str) -> bool:
    """A JWT's first part decodes to a JSON object naming its algorithm or type."""
    head = value.split(".", 1)[0]
    try:
        doc = json.loads(base64.urlsafe_b64decode(head + "=" * (-len(head) % 4)))
    except (ValueError, UnicodeDecodeError):
        return False
    return isinstance(doc, dict) and bool({"alg", "typ", "enc", "kid"} & set(doc))


def mixed_token_check(value: str) -> bool:
    """A generated token: long, random, with digits and both cases (not a word, hash or id)."""
    return (not looks_placeholder(value) and any(c.isdigit() for c in value) and any(c.isupper() for c in value)
            and any(c.islower() for c in value) and shannon_entropy(value) >= 3.5)
