"""Secret redaction: one engine for recall policy, retain scrubbing and adapter storage.

Every rule is compiled once and guarded by a cheap substring prefilter, so text that cannot
contain a given kind of secret never runs that rule's regex. A match becomes
`[redacted:<kind>]`; surrounding text and JSON structure stay intact. Counts per kind are
returned, never the secret or any prefix of it.
"""

from __future__ import annotations

import math
import re
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator

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


def shannon_entropy(value: str) -> float:
    if not value:
        return 0.0
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


_TEMPLATE = re.compile(r"^(?:<[^<>]*>|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\{\{.*\}\}|%\(\w+\)s|\[redacted:[a-z_]+\])$",
                       re.S)


def looks_placeholder(value: str) -> bool:
    """True for values that only stand in for a secret: `sk-...`, `<YOUR_KEY>`, `xxxx`, `${VAR}`,
    `your-api-key-here`. A real secret that happens to contain a word such as "example" is not
    one: only values with no digits or symbols beyond separators count as words."""
    v = value.strip().strip("\"'")
    low = v.lower()
    if not v or low.startswith(REDACTED_PREFIX) or low in _PLACEHOLDER_VALUES:
        return True
    if _TEMPLATE.match(v) or "..." in v or "…" in v or "****" in v or "xxxx" in low:
        return True
    if any(marker in v for marker in ("${", "{{", "%(", "<", ">")):
        return True
    if re.fullmatch(r"[A-Za-z_\-]+", v) and any(word in low for word in _PLACEHOLDER_WORDS):
        return True
    core = re.sub(r"^[a-z]+[-_]", "", low)  # drop a vendor prefix such as sk- or ghp_
    return len(set(core.replace("-", "").replace("_", ""))) <= 2


def _random_enough(value: str, min_entropy: float = 3.0) -> bool:
    return not looks_placeholder(value) and shannon_entropy(value) >= min_entropy


@dataclass(frozen=True)
class Rule:
    """One kind of secret: a regex, the group that holds the secret, and a prefilter."""

    kind: str
    pattern: re.Pattern[str]
    keywords: tuple[str, ...] = ()
    ignore_case_keywords: bool = False
    group: int = 0
    check: Callable[[str], bool] | None = None


def _r(kind: str, regex: str, keywords: Iterable[str] = (), *, flags: int = 0, group: int = 0,
       check: Callable[[str], bool] | None = None, icase: bool = False) -> Rule:
    return Rule(kind, re.compile(regex, flags), tuple(keywords), icase, group, check)


# The keyword must start an identifier or follow a separator (DATABASE_PASSWORD, db.password), which
# the lookbehind in the rule expresses without a costly identifier-prefix loop at every position.
_ASSIGN_KEYS = (
    r"(?:password|passwd|pwd|pass|secret|secret[_\-]?key|api[_\-]?key|apikey|"
    r"access[_\-]?key|access[_\-]?token|auth[_\-]?token|api[_\-]?token|refresh[_\-]?token|token|"
    r"client[_\-]?secret|private[_\-]?key|credentials?)"
)


_CODE_REFERENCE = re.compile(
    r"^(?:(?:os|process|sys|env|environ|config|settings|secrets|vault|self|this|ctx|app|params|args|opts|"
    r"options|request|req|cfg|conf)\b|[A-Za-z_$][\w$]*\(|[a-z_$][a-z0-9_$]*(?:\.[A-Za-z_$][\w$]*)+\(?$)")


def _assignment_check(value: str) -> bool:
    """A value worth redacting: not a placeholder, not code that reads the secret from elsewhere
    (`os.environ[...]`, `getpass()`, `config.db_password`), not a comment."""
    if looks_placeholder(value) or value.startswith(("#", "//")) or _CODE_REFERENCE.match(value):
        return False
    return len(value) >= 6 and shannon_entropy(value) >= 2.5


def _bearer_check(value: str) -> bool:
    """A bearer credential is long and random; prose ('Bearer authentication') is neither."""
    token = value.split(":", 1)[-1]
    if looks_placeholder(value) or len(token) < 16:
        return False
    return any(c.isdigit() for c in token) or shannon_entropy(token) >= 3.5


# Order matters: specific vendor formats first, generic shapes (bearer, assignments) last,
# so a token is reported under its most precise kind.
BUILTIN_RULES: tuple[Rule, ...] = (
    _r("private_key",
       r"-----BEGIN ((?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?)-----[\s\S]*?-----END \1-----",
       ["PRIVATE KEY"]),
    _r("anthropic", r"\bsk-ant-[A-Za-z0-9_\-]{20,}", ["sk-ant-"], check=_random_enough),
    _r("openai", r"(?<![A-Za-z0-9_\-])sk-(?!ant-)(?:proj-|svcacct-|admin-|None-)?[A-Za-z0-9_\-]{20,}",
       ["sk-"], check=_random_enough),
    _r("aws_access_key_id", r"\b(?:AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}\b",
       ["AKIA", "ASIA", "ABIA", "ACCA", "AGPA", "AIDA", "AROA", "AIPA", "ANPA", "ANVA", "APKA"],
       check=lambda v: not looks_placeholder(v)),
    _r("aws_secret_access_key",
       r"(?i)(?:aws[_\-\s]?secret[_\-\s]?access[_\-\s]?key|aws[_\-\s]?secret[_\-\s]?key|secret[_\-\s]?access[_\-\s]?key|"
       r"aws[_\-\s]?secret|secretaccesskey)"
       r"(?:[\"']?\s*(?::|=|=>|\bis\b|\bwas\b|\bof\b)?\s*[\"'`(]?\s*)([A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
       ["secret"], icase=True, group=1, check=_random_enough),
    _r("aws_session_token",
       r"(?i)(?:aws[_\-\s]?session[_\-\s]?token|session[_\-\s]?token|security[_\-\s]?token|sessiontoken)"
       r"(?:[\"']?\s*(?::|=|=>|\bis\b|\bwas\b)?\s*[\"'`]?\s*)([A-Za-z0-9/+=]{100,})",
       ["token"], icase=True, group=1, check=_random_enough),
    _r("aws_session_token", r"\b(?:FwoGZXIvYXdzE|IQoJb3JpZ2luX2Vj|FQoGZXIvYXdzE)[A-Za-z0-9/+=]{40,}",
       ["FwoGZXIvYXdz", "IQoJb3JpZ2lu", "FQoGZXIvYXdz"]),
    _r("github", r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{36,255}\b", ["ghp_", "gho_", "ghu_", "ghs_", "ghr_"]),
    _r("github", r"\bgithub_pat_[A-Za-z0-9_]{22,255}\b", ["github_pat_"]),
    _r("gitlab", r"\bgl(?:pat|dt|rt|ptt|cbt|soat|ffct)-[A-Za-z0-9_\-]{20,}", ["glpat-", "gldt-", "glrt-", "glptt-", "glcbt-", "glsoat-", "glffct-"]),
    _r("slack_webhook", r"https://hooks\.slack\.com/(?:services|workflows|triggers)/[A-Za-z0-9_/\-]{20,}",
       ["hooks.slack.com"]),
    _r("slack", r"\bxox[abposre]-(?:[0-9]+-)?[A-Za-z0-9\-]{10,}", ["xox"]),
    _r("slack", r"\bxapp-\d-[A-Z0-9]+-\d+-[a-z0-9]+", ["xapp-"]),
    _r("stripe", r"\b(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}\b", ["_live_", "_test_"]),
    _r("google_api_key", r"\bAIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])", ["AIza"]),
    _r("sendgrid", r"\bSG\.[A-Za-z0-9_\-]{22}\.[A-Za-z0-9_\-]{43}\b", ["SG."]),
    _r("twilio", r"\bSK[0-9a-f]{32}\b", ["SK"]),
    _r("twilio",
       r"(?i)twilio\b[^\n]{0,60}?\b(?:auth[_\-\s]?token|api[_\-\s]?(?:key[_\-\s]?)?secret|secret|token)\b"
       r"(?:[\"']?\s*(?::|=|=>|\bis\b|\bwas\b)?\s*[\"'`]?\s*)([A-Za-z0-9]{32})\b",
       ["twilio"], icase=True, group=1, check=_random_enough),
    _r("mailgun", r"\bkey-[0-9a-f]{32}\b", ["key-"]),
    _r("digitalocean", r"\bdo[opr]_v1_[0-9a-f]{64}\b", ["_v1_"]),
    _r("shopify", r"\bshp(?:at|ca|pa|ss)_[0-9a-fA-F]{32}\b", ["shp"]),
    _r("databricks", r"\bdapi[0-9a-f]{32}(?:-\d)?\b", ["dapi"]),
    _r("doppler", r"\bdp\.(?:st|ct|sa|scim|audit)\.[A-Za-z0-9_\-.]{40,}", ["dp."]),
    _r("telegram", r"\b\d{8,10}:AA[A-Za-z0-9_\-]{33}\b", [":AA"]),
    _r("discord", r"\b[MNO][A-Za-z0-9_\-]{23,25}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,38}\b", ["."],
       check=_random_enough),
    _r("square", r"\bEAAA[A-Za-z0-9_\-]{60}\b", ["EAAA"]),
    _r("linear", r"\blin_api_[A-Za-z0-9]{40}\b", ["lin_api_"]),
    _r("atlassian", r"\bATATT3[A-Za-z0-9_\-=]{180,}", ["ATATT3"]),
    _r("newrelic", r"\bNRAK-[A-Z0-9]{27}\b", ["NRAK-"]),
    _r("npm", r"\bnpm_[A-Za-z0-9]{36}\b", ["npm_"]),
    _r("pypi", r"\bpypi-AgE[A-Za-z0-9_\-]{50,}", ["pypi-"]),
    _r("huggingface", r"\bhf_[A-Za-z0-9]{30,}\b", ["hf_"], check=_random_enough),
    _r("azure_storage", r"(?i)\b(?:AccountKey|SharedAccessKey)=([A-Za-z0-9+/]{20,}={0,2})",
       ["key="], icase=True, group=1),
    _r("azure_storage", r"(?i)[?&]sig=([A-Za-z0-9%+/]{20,}(?:%3D|=){0,2})", ["sig="], icase=True, group=1),
    _r("jwt", r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}", ["eyJ"]),
    _r("url_password", r"\b[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@\"'<>]*:([^\s@/\"'<>]+)@", ["://"],
       group=1, check=lambda v: not looks_placeholder(v)),
    _r("bearer", r"(?i)\bbearer\s+((?:[A-Za-z0-9._\-]{1,128}:)?[A-Za-z0-9._~+/\-]{8,}=*)", ["bearer"], icase=True,
       group=1, check=_bearer_check),
    _r("basic_auth", r"(?i)\bbasic\s+([A-Za-z0-9+/]{12,}={0,2})(?![A-Za-z0-9+/=])", ["basic"],
       icase=True, group=1, check=lambda v: not looks_placeholder(v) and shannon_entropy(v) >= 3.0),
    _r("credential_assignment",
       rf"(?i)(?<![A-Za-z0-9]){_ASSIGN_KEYS}[\"']?[ \t]*(?::=|=>|:|=)[ \t]*([\"']?)([^\s\"',;{{}}\[\]]{{4,}})\1",
       ["pass", "pwd", "secret", "key", "token", "credential"], icase=True, group=2,
       check=_assignment_check),
    # a password or key stated in prose: "the database password is Xy7…"
    _r("credential_assignment",
       r"(?i)\b(?:password|passphrase|passwd|secret|api[ _\-]?key|access[ _\-]?key|auth[ _\-]?token|token)"
       r"\s+(?:is|was|=|:)\s+[\"'`]?([^\s\"'`,;]{6,}?)[\"'`]?(?=[,.;:!?)]*(?:\s|$))",
       ["pass", "secret", "key", "token"], icase=True, group=1,
       check=lambda v: _assignment_check(v) and any(c.isdigit() for c in v) and any(c.isalpha() for c in v)),
    # a secret-named key in a mapping: env["MYSQL_PWD"] = "…", settings['api_key'] = '…'
    _r("credential_assignment",
       r"(?i)\[\s*[\"'][A-Za-z0-9_.\-]*(?:password|passwd|pwd|secret|token|api_?key|auth)[A-Za-z0-9_.\-]*[\"']\s*\]"
       r"\s*=\s*([\"'])([^\"'\s]{4,})\1",
       ["pass", "pwd", "secret", "token", "key", "auth"], icase=True, group=2, check=_assignment_check),
    # environment-style names that end in a secret word: PGPASSWORD=…, MYSQL_PWD=…, REDISCLI_AUTH=…
    _r("credential_assignment",
       r"(?<![A-Za-z0-9_])[A-Z][A-Z0-9_]*(?:PASSWORD|PASSWD|PWD|SECRET|TOKEN|APIKEY|API_KEY|_AUTH|_PASS|CREDENTIALS?)"
       r"[A-Z0-9_]*[ \t]*=[ \t]*([\"']?)([^\s\"']{4,})\1",
       ["PASS", "PWD", "SECRET", "TOKEN", "KEY", "AUTH", "CREDENTIAL"], group=2, check=_assignment_check),
)

_SENSITIVE_KEY = re.compile(
    r"(?i)^(?:[a-z0-9]+[_\-.])*(?:password|passwd|pwd|secret|secret[_\-]?key|api[_\-]?key|auth[_\-]?token|"
    r"access[_\-]?token|refresh[_\-]?token|api[_\-]?token|client[_\-]?secret|private[_\-]?key)$|"
    r"^(?:authorization|proxy[_\-]authorization|x[_\-]api[_\-]key|api[_\-]?key|apikey|password|passwd|"
    r"pwd|secret|client[_\-]?secret|secret[_\-]?key|private[_\-]?key|access[_\-]?token|refresh[_\-]?token|"
    r"auth[_\-]?token|api[_\-]?token|id[_\-]?token|aws[_\-]?secret[_\-]?access[_\-]?key|connection[_\-]?string)$"
)

_RULES_FILE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rules": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["kind", "pattern"],
                "additionalProperties": False,
                "properties": {
                    "kind": {"type": "string", "pattern": "^[a-z0-9_]+$"},
                    "pattern": {"type": "string", "minLength": 1},
                    "keywords": {"type": "array", "items": {"type": "string"}},
                    "group": {"type": "integer", "minimum": 0},
                },
            },
        },
        "allow": {"type": "array", "items": {"type": "string", "minLength": 1}},
    },
}


class RedactionConfigError(ValueError):
    pass


@dataclass(frozen=True)
class _Prefilter:
    """All rules' keywords checked in one pass: most text holds none of them, and then only the
    keyword-less rules run (checking each rule's keywords one by one cost ~20 µs per string)."""

    exact: tuple[tuple[str, frozenset[int]], ...]  # keyword → indexes of the rules it enables
    folded: tuple[tuple[str, frozenset[int]], ...]  # the same, matched against lower-cased text
    always: frozenset[int]

    @classmethod
    def of(cls, rules: tuple[Rule, ...]) -> "_Prefilter":
        exact: dict[str, set[int]] = {}
        folded: dict[str, set[int]] = {}
        always = set()
        for i, rule in enumerate(rules):
            if not rule.keywords:
                always.add(i)
            for k in rule.keywords:
                (folded if rule.ignore_case_keywords else exact).setdefault(
                    k.lower() if rule.ignore_case_keywords else k, set()).add(i)
        return cls(tuple((k, frozenset(v)) for k, v in exact.items()),
                   tuple((k, frozenset(v)) for k, v in folded.items()), frozenset(always))

    def rules_for(self, text: str) -> set[int] | frozenset[int]:
        hits = [ids for k, ids in self.exact if k in text]
        lower = text.lower()
        hits += [ids for k, ids in self.folded if k in lower]
        return self.always.union(*hits) if hits else self.always


class _Memo:
    """Recent results by input string, bounded in total characters. Agents resend the whole
    conversation every turn and the same memories come back on many recalls, so most strings
    a proxy scrubs it has scrubbed moments ago; scanning one costs ~1 µs per 25 characters."""

    def __init__(self, max_chars: int = 4_000_000, max_item_chars: int = 64_000) -> None:
        self.max_chars = max_chars
        self.max_item_chars = max_item_chars
        self._items: OrderedDict[str, tuple[str, tuple[tuple[str, int], ...]]] = OrderedDict()
        self._chars = 0

    def get(self, text: str) -> tuple[str, tuple[tuple[str, int], ...]] | None:
        hit = self._items.get(text)
        if hit is not None:
            self._items.move_to_end(text)
        return hit

    def put(self, text: str, result: tuple[str, tuple[tuple[str, int], ...]]) -> None:
        if len(text) > self.max_item_chars or text in self._items:
            return
        self._items[text] = result
        self._chars += len(text) + len(result[0])
        while self._chars > self.max_chars:
            old, (out, _) = self._items.popitem(last=False)
            self._chars -= len(old) + len(out)


@dataclass
class Redactor:
    rules: tuple[Rule, ...] = BUILTIN_RULES
    allow: tuple[re.Pattern[str], ...] = ()

    def __post_init__(self) -> None:
        self._prefilter = _Prefilter.of(self.rules)
        self._memo = _Memo()

    def _allowed(self, secret: str) -> bool:
        return any(p.fullmatch(secret) for p in self.allow)

    def text(self, text: str, counts: Counter[str] | None = None) -> tuple[str, Counter[str]]:
        """Redact one string; returns the new string and counts per kind."""
        counts = counts if counts is not None else Counter()
        if len(text) < 8:
            return text, counts
        hit = self._memo.get(text)
        if hit is None:
            found: Counter[str] = Counter()
            hit = (self._scan(text, found), tuple(found.items()))
            self._memo.put(text, hit)
        for kind, n in hit[1]:
            counts[kind] += n
        return hit[0], counts

    def _scan(self, text: str, counts: Counter[str]) -> str:
        enabled = self._prefilter.rules_for(text)
        for i, rule in enumerate(self.rules):
            if i in enabled:
                text = rule.pattern.sub(lambda m, r=rule: self._replace(m, r, counts), text)
        return text

    def _replace(self, m: re.Match[str], rule: Rule, counts: Counter[str]) -> str:
        secret = m.group(rule.group)
        if not secret or secret.startswith(REDACTED_PREFIX) or self._allowed(secret):
            return m.group(0)
        if rule.check is not None and not rule.check(secret):
            return m.group(0)
        counts[rule.kind] += 1
        whole = m.group(0)
        if rule.group == 0:
            return f"{REDACTED_PREFIX}{rule.kind}]"
        start, end = m.span(rule.group)
        offset = m.start(0)
        return whole[: start - offset] + f"{REDACTED_PREFIX}{rule.kind}]" + whole[end - offset :]

    def json(self, value: Any, counts: Counter[str] | None = None) -> tuple[Any, Counter[str]]:
        """Redact a decoded JSON value: sensitive keys lose their whole value, strings are scanned."""
        counts = counts if counts is not None else Counter()
        return self._walk(value, counts), counts

    def _walk(self, value: Any, counts: Counter[str]) -> Any:
        if isinstance(value, str):
            return self.text(value, counts)[0]
        if isinstance(value, list):
            return [self._walk(v, counts) for v in value]
        if isinstance(value, dict):
            out = {}
            for key, v in value.items():
                if isinstance(v, str) and isinstance(key, str) and _SENSITIVE_KEY.match(key) \
                        and not looks_placeholder(v) and not self._allowed(v):
                    scanned, found = self.text(v)
                    if found:
                        counts.update(found)
                        out[key] = scanned
                    else:
                        counts["secret_field"] += 1
                        out[key] = f"{REDACTED_PREFIX}secret_field]"
                else:
                    out[key] = self._walk(v, counts)
            return out
        return value

    @classmethod
    def from_file(cls, path: str | Path | None) -> "Redactor":
        """Built-in rules plus an operator's YAML file of extra rules and allow-list patterns."""
        if not path:
            return cls()
        try:
            doc = yaml.safe_load(Path(path).read_text()) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise RedactionConfigError(f"{path}: cannot read redaction rules: {exc}") from None
        errors = list(Draft202012Validator(_RULES_FILE_SCHEMA).iter_errors(doc))
        if errors:
            err = errors[0]
            where = ".".join(str(p) for p in err.absolute_path) or "<root>"
            raise RedactionConfigError(f"{path}: field '{where}': {err.message}")
        extra = []
        for i, spec in enumerate(doc.get("rules", [])):
            try:
                pattern = re.compile(spec["pattern"])
            except re.error as exc:
                raise RedactionConfigError(f"{path}: field 'rules.{i}.pattern': {exc}") from None
            extra.append(Rule(spec["kind"], pattern, tuple(spec.get("keywords", ())), False,
                              int(spec.get("group", 0))))
        allow = []
        for i, pat in enumerate(doc.get("allow", [])):
            try:
                allow.append(re.compile(pat))
            except re.error as exc:
                raise RedactionConfigError(f"{path}: field 'allow.{i}': {exc}") from None
        # Operator rules run before the generic shapes so their kind name wins.
        return cls(rules=tuple(extra) + BUILTIN_RULES, allow=tuple(allow))
