"""A credential no rule set names: found by what is written around it and by the shape of the
value, not by a vendor's format. Hundreds of services issue keys with no fixed prefix; people write
them after a credential word ("the Datadog API key is …", "token - '…'", `[DEBUG] Using Key=…`,
`fooToken := "…"`, `?license_key=…`), next to the account they belong to (`… / ops@acme.io`), or
in a webhook's path. The word and separator say "a credential follows"; `random_value` says the
value is a generated one and not a word, a name, a path, a version or a reference.

Every pattern is RE2 (linear on any input); the value checks are linear Python over one value."""

from __future__ import annotations

import re2

from .checks import looks_placeholder, looks_reference, shannon_entropy
from .rule import Rule, rule

# The words that name a credential. Lower-case ones start after a non-letter (`api_key`, `--token`,
# `X-Foo-Key`); capitalised ones may also follow a lower-case letter or digit (`githubKey`, `authToken`).
_WORDS = ("key|token|secret|password|passwd|passphrase|pwd|pass|auth|authorization|bearer|apikey|license|"
          "licence|credentials?|creds|dsn|sig|signature")
_NAME = (r"(?:(?:^|[^A-Za-z])(?i:" + _WORDS + r")|[a-z0-9](?:Key|Token|Secret|Password|Passwd|Pwd|Pass|Auth|"
         r"Credentials?|Creds|License|Licence|Dsn|Sig|Signature|KEY|TOKEN|SECRET|PASSWORD|PWD|AUTH))")
# up to four more words before a separator: "the API key for Logz.io is …", "the key, new one = …",
# "the secret (Datadog) for webhook signing: …"
_FILLER = r"(?:,?[ \t]+\(?[A-Za-z0-9][A-Za-z0-9.&]{0,15}\)?){0,4}?"
_SEP = (r"[\"'\]*_]{0,4}[ \t]{0,8}(?:(?::=|=>|->|→|==|=|:|-|,|\||>|\bis\b|\bwas\b|\bare\b)[ \t]{0,8}\r?\n?[ \t]{0,8}|[ \t]{1,8})"
        r"(?:[a-z]{2,10}[ \t]{1,4})?"  # one word after it: "… key is now …", "… token: new …"
        r"(?:@?[\"'`(]|\()?[ \t]{0,2}(?i:(?:bearer|token|basic|bot|apikey|key|ssws|oauth|hmac)[ \t]{1,4})?")
# (a closing quote, bracket or Markdown emphasis may come first: `"api_key": `, `**token**: `)
# a value: no spaces, quotes, brackets, commas or `&` (a query's next parameter), holding something
# other than lower-case letters, so a word after the name does not use up the match ("token expired,
# replaced with …"); its length is checked in `random_value`
_V = r"[^\s\"'`<>,;()\[\]{}&]"
# (one way to match: lower-case letters, the first other character, the rest; cheap to capture)
_VALUE = "([a-z]*" + _V.replace("&]", "&a-z=:]") + _V + "*)"
_PLAIN_VALUE = "(" + _V + "{8,})"

_NAMESPACED = re2.compile(r"^[a-z][a-z0-9]{2,15}:[^/]")  # `episode:hist1_<hash>`, `user:42:…`: a namespaced name
_VERSION = re2.compile(r"^v?\d+(?:[._\-]\d+)+(?:[._\-+][A-Za-z0-9.]+)?$")
_EMAIL = re2.compile(r"^[A-Za-z0-9._%+\-]+@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}$")
_PIECES = re2.compile(r"[\-_.:/\\@+=~]+")
_WORDY = re2.compile(r"^(?:[A-Z]?[a-z]+(?:[A-Z](?:[a-z]+|[0-9]{1,2})[0-9]{0,2})*|[A-Z]+|[A-Za-z]+[0-9]{1,3}|[0-9]{1,6}|v[0-9]+)$")
_CAMEL = re2.compile(r"^[A-Za-z][a-z]+(?:[A-Z][a-z0-9]+)+$|^[A-Z]+(?:_[A-Z0-9]+)*$")  # camelCase, CONSTANT_NAME
_TRAILING = ".,:;!?)]}'\"`"


def _classes(v: str) -> tuple[int, int, int, int]:
    lower = upper = digit = other = 0
    for c in v:
        if c.islower():
            lower += 1
        elif c.isupper():
            upper += 1
        elif c.isdigit():
            digit += 1
        else:
            other += 1
    return lower, upper, digit, other


def _case_switches(v: str) -> float:
    """Share of neighbouring letters whose case differs: ~0.5 in random mixed case, low in CamelCase."""
    letters = [c.isupper() for c in v if c.isalpha()]
    if len(letters) < 2:
        return 0.0
    return sum(a != b for a, b in zip(letters, letters[1:])) / (len(letters) - 1)


def random_value(value: str, min_len: int = 10) -> bool:
    """Whether `value` has the shape of a generated credential: long enough, high entropy, a mix of
    character classes, and not a word, a phrase of words, an identifier, a version, a path, an
    e-mail address, a URL or a reference to where a secret lives. (The character mix is tested
    first: it is the cheapest test and rejects most candidates.)"""
    v = value.strip().rstrip(_TRAILING).strip("\"'`")
    n = len(v)
    if n < min_len or n > 512 or "://" in v or "redacted:" in v or any(c.isspace() for c in v):
        return False
    if not _mixed(v, n):
        return False
    if looks_placeholder(v) or looks_reference(v) or _VERSION.search(v) or _EMAIL.search(v) or _CAMEL.search(v):
        return False
    if v.startswith(("!", "ENC[", "*", "&")) or v.isdigit() or _NAMESPACED.search(v):
        return False  # a YAML tag, a SOPS value, a pointer or spread in code, a number, a namespaced name
    pieces = [p for p in _PIECES.split(v) if p]
    if pieces and all(_WORDY.search(p) for p in pieces):
        return False  # words and small numbers joined by separators: `from-env`, `user:42:profile`, `page2`
    return shannon_entropy(v) >= (2.8 if n < 16 else 3.2)


def _mixed(v: str, n: int) -> bool:
    """The character classes of a generated value."""
    lower, upper, digit, other = _classes(v)
    letters = lower + upper
    if digit and letters:
        if lower and upper:
            return digit >= 2 or n >= 20 or _case_switches(v) >= 0.3
        return n >= 16 and digit >= 3 and letters >= 3  # one-case alphanumerics: hex, base32, lower-case keys
    if other >= 2 and letters >= 4 and n >= 12:
        return True  # letters and symbols, not in word-like pieces: a typed password
    if not digit:
        return n >= 16 and bool(lower and upper) and _case_switches(v) >= 0.3  # random letters, not CamelCase
    return False


def _trim(text: str, s: int, e: int) -> tuple[int, int] | None:
    """A value's trailing sentence punctuation is not part of it ("… is Xy7q2…." ends a sentence)."""
    if text.startswith("(", e):
        return None  # `auth = _SigV4Auth(config=…)`: a call, not a value
    while e > s and text[e - 1] in _TRAILING:
        e -= 1
    return (s, e) if e > s else None


# "key ID 3AA5…", "token type: …", "key fingerprint …": the words after the credential word say what follows
_NOT_THE_SECRET = re2.compile(r"(?i)\b(?:id|ids|fingerprint|hash|checksum|digest|name|file|path|url|uri|length|size|"
                              r"count|type|format|version|expiry|expires|prefix|suffix|hint)\b")


def _names_no_secret(secret: str, match: str, line: str) -> bool:
    """The name says what follows is not the secret, or it is a (cut) PEM header: `pieces.py` takes those."""
    cut = match.rfind(secret)
    return (_NOT_THE_SECRET.search(match[:cut] if cut >= 0 else match) is not None or "PRIVATE KEY" in line
            or "KEY-----" in match)  # a PEM header cut before "PRIVATE", as written or JSON-escaped


_KEY_BODY_LINE = re2.compile(r"^[A-Za-z0-9+/]{40,}={0,2}$")


def _alone_on_next_line(v: str) -> bool:
    """A generated value; a line of base64 40+ long is left to `pieces.py` (it is a cut key's body as
    often as a token, and pieces.py takes the whole run at once)."""
    return not _KEY_BODY_LINE.search(v) and random_value(v)


def _long_random(v: str) -> bool:
    return random_value(v, 16)


_PREFIX_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.")
_BEFORE_TOKEN = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-./+")


def _with_prefix(text: str, s: int, e: int) -> tuple[int, int] | None:
    """The body's span widened to its prefix (at most 3 pieces, 40 characters), which must start a
    token: not a path or file-name segment (`/xoxo_love_<hex>.png`), not part of a longer word."""
    if e - s > 256:
        return None
    a = s
    while a > 0 and s - a < 40 and text[a - 1] in _PREFIX_CHARS:
        a -= 1
    if a > 0 and text[a - 1] in _BEFORE_TOKEN:
        return None
    return (a, e) if a < s - 1 else None


_PREFIX_SPLIT = re2.compile(r"^((?:[A-Za-z][A-Za-z0-9]{1,11}[_\-.]){1,3})([A-Za-z0-9+/]{24,256})={0,2}$")


def _prefixed(v: str) -> bool:
    """A vendor prefix and a body random enough on its own: mixed case with digits, in random order."""
    m = _PREFIX_SPLIT.search(v)
    if m is None:
        return False
    if m.group(1).lower().startswith(("pk", "pub", "public")):
        return False  # a publishable key (`pk_live_…`, `pk.…`) is public by design
    body = m.group(2)
    lower, upper, digit, _ = _classes(body)
    if shannon_entropy(body) < 3.5 or looks_placeholder(body):
        return False
    # one-case bodies (hex, base32) are left to the rules that read a name: bare, `<prefix>_<hex>` is as
    # often a content-hash or object id (memplane's own `hist1_<sha256>`, `ep_<hex>`) as a key
    return bool(lower and upper) and digit >= 2 and _case_switches(body) >= 0.3


_PASSWORD_NAME = re2.compile(r"(?i)pass|pwd|credential|basic")


def key_must_look_generated(secret: str, match: str, line: str) -> bool:
    """An allowlist for rules that find a value by its name: under a key, token or secret name the value
    must look generated (`random_value`) — `token=from-env`, `api_key="X-Api-Key"`, `secret: revoked`
    are not credentials; under a password name a word may well be one, so it is not asked."""
    return not password_named(match.replace(secret, "", 1)) and not random_value(secret, 8)


def names_a_thing(secret: str, match: str, line: str) -> bool:
    """The narrower allowlist for gitleaks' generic rules: under a key or token name, a value made only of
    words, small numbers and separators (`tailscale-prod-v2`, `X-Api-Key`) or a camelCase name."""
    if password_named(match.replace(secret, "", 1)):
        return False
    v = secret.strip("\"'`")
    pieces = [p for p in _PIECES.split(v) if p]
    return bool(_CAMEL.search(v)) or bool(pieces) and all(_WORDY.search(p) for p in pieces)


def password_named(name: str) -> bool:
    """Whether a name says password (`db_pass`, `PGPASSWORD`, `basic_auth`): a person may choose a word."""
    return _PASSWORD_NAME.search(name) is not None


_EMAIL_PART = r"[A-Za-z0-9._%+\-]{1,64}@[A-Za-z0-9\-]{1,63}(?:\.[A-Za-z0-9\-]{1,63}){0,4}\.[A-Za-z]{2,24}"
_TOKEN_CHARS = r"[A-Za-z0-9._~+/=!#$%^*\-]"

NAMED_RULES: tuple[Rule, ...] = (
    # a credential word, a separator as people write it, a random value
    rule("named_credential", _NAME + _FILLER + _SEP + _VALUE,
         ["key", "token", "secret", "pass", "pwd", "auth", "bearer", "license", "licence", "cred", "dsn", "sig"],
         icase=True, group=1, check=random_value, refine=_trim, allowed=_names_no_secret),
    # the value alone on the line after the one that names it ("new Datadog secret:\n<value>"; the colon
    # is required: "here is the key\n" before a pasted key's body is common and left to pieces.py)
    rule("named_credential", _NAME + r"[\"'*_]{0,4}[ \t]{0,4}[:=][ \t]*\r?\n[ \t]*[\"'`]?" + _PLAIN_VALUE + r"[\"'`]?[ \t]*(?:\r?\n|$)",
         ["key", "token", "secret", "pass", "pwd", "auth", "license", "licence", "cred"], icase=True, group=1,
         check=_alone_on_next_line, refine=_trim, allowed=_names_no_secret),
    # an environment list's entry: `- name: FOO_TOKEN` then `value: "…"` (Kubernetes, Compose, CI)
    rule("named_credential",
         r"(?i)\bname[\"']?[ \t]*[:=][ \t]*[\"']?[A-Za-z0-9_.\-]{0,64}(?:key|token|secret|passw(?:or)?d|pwd|pass|auth|"
         r"credentials?)[A-Za-z0-9_.\-]{0,64}[\"']?[ \t]*,?[ \t]*(?:\r?\n[ \t]*)?[\"']?value[\"']?[ \t]*[:=][ \t]*[\"']?" + _VALUE,
         ["name"], icase=True, group=1, check=lambda v: random_value(v, 8), refine=_trim),
    # a quoted value whose comment names it: `"3f9a…"  # Datadog api key`
    rule("named_credential",
         r"[\"'`]([^\s\"'`]{16,})[\"'`][ \t,;)]{0,4}(?:#|//|--|/\*)[^\n]{0,60}?" + _NAME,
         ["#", "//", "--", "/*"], group=1, check=_long_random),
    # `mysql -u svc -pS3cr…`, `mysqldump -h db -u root -p…`: a password glued to `-p` after a user
    rule("named_credential", r"(?:^|\s)-u[ \t]*[^\s\-][^\s]{0,64}[ \t]+(?:-h[ \t]*[^\s]+[ \t]+)?-p([^\s\-][^\s]{3,})",
         ["-p"], group=1, check=lambda v: not looks_placeholder(v) and not looks_reference(v)),
    # a value listed with the account it belongs to: "Datadog: 3f9a… / ops@acme.io", "ops@acme.io / 3f9a…"
    rule("named_credential", r"(?:^|[\s:=(\[\"'])(" + _TOKEN_CHARS + r"{16,})[ \t]{0,4}[/|][ \t]{0,4}" + _EMAIL_PART,
         ["@"], group=1, check=_long_random),
    rule("named_credential", _EMAIL_PART + r"[ \t]{0,4}[/|:][ \t]{0,4}(" + _TOKEN_CHARS + r"{16,})(?:[\s\"')\]]|$)",
         ["@"], group=1, check=_long_random),
    # a webhook's path: every random segment after `/webhook(s)/` or `/hooks/`
    rule("webhook_url", r"(?i)/(?:webhooks?|hooks|webhookb2|hook)/([A-Za-z0-9_\-.@/+!:%*~=]+)",
         ["hook"], icase=True, group=1, inner=r"([A-Za-z0-9_\-+!.:%*~=]{16,})", check=_long_random),
    # a vendor's own `<prefix>_<body>` / `<prefix>-<body>` key no rule set names yet (`lsv2_pt_…`-style): a
    # short prefix, then a long random body, not a path or file-name segment. The pattern finds the body
    # after a separator and `_with_prefix` reads the prefix back: one small DFA instead of counted prefix
    # pieces, as this rule runs on nearly every text.
    rule("vendor_token", r"[_\-.]([A-Za-z0-9+/]{24,}={0,2})(?:[^A-Za-z0-9_\-./+=]|[./](?:\s|$)|$)",
         ["_", "-", "."], group=1, check=_prefixed, refine=_with_prefix),
)
