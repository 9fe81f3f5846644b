"""The redaction engine: one pass per enabled rule over a string, every pattern RE2 (linear time on
any input), rules enabled by one multi-keyword RE2 set match over the text, so text that cannot
contain a given kind of secret never runs that rule. A match becomes `[redacted:<kind>]`; the text
around it and JSON structure stay intact. Counts per kind are returned, never the secret."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable
from typing import Any, TypeVar

import orjson
import re2
import yaml
from jsonschema import Draft202012Validator

from ..memo import TextMemo
from .checks import REDACTED_PREFIX, looks_placeholder
from .gitleaks import gitleaks_rules
from .lookalikes import allowed as lookalike_allowed
from .named import NAMED_RULES, password_named, random_value
from .overlay import OVERLAY_RULES
from .pieces import KEY_BODY_RULE
from .rule import Rule, RuleError, compile_re2

# Strings this long or longer (in characters, summed over a JSON document) are scanned in a worker
# thread by the async entry points; shorter ones cost well under a millisecond on the loop (a few ms
# when built to produce thousands of candidate matches).
ASYNC_THRESHOLD = 8_192
T = TypeVar("T")


def builtin_rules() -> tuple[Rule, ...]:
    """memplane's overlay first (familiar kinds, its own shapes), then gitleaks' rules, then credentials
    found by their name and shape alone (named.py), then the bare key-body shape (pieces.py) for what is left."""
    return OVERLAY_RULES + gitleaks_rules() + NAMED_RULES + (KEY_BODY_RULE,)


_SENSITIVE_KEY = re2.compile(
    r"(?i)^(?:[a-z0-9]+[_\-.])*(?:password|passwd|pwd|secret|secret[_\-]?key|api[_\-]?key|auth[_\-]?token|"
    r"access[_\-]?token|refresh[_\-]?token|api[_\-]?token|client[_\-]?secret|private[_\-]?key)$|"
    r"^(?:authorization|proxy[_\-]authorization|x[_\-]api[_\-]key|api[_\-]?key|apikey|password|passwd|"
    r"pwd|secret|client[_\-]?secret|secret[_\-]?key|private[_\-]?key|access[_\-]?token|refresh[_\-]?token|"
    r"auth[_\-]?token|api[_\-]?token|id[_\-]?token|aws[_\-]?secret[_\-]?access[_\-]?key|connection[_\-]?string)$"
)

_SECRET_WORD_KEY = re2.compile(r"(?i)pass|pwd|secret|token|key|cred|auth|cert|sig")

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


class _Prefilter:
    """All rules' keywords matched in one RE2 set pass each over the text and its lower-case form
    (checking ~300 keywords one by one cost ~600 µs per 4 KB); then only the rules whose keyword
    occurred, plus the keyword-less ones, run."""

    def __init__(self, rules: tuple[Rule, ...]) -> None:
        exact: dict[str, set[int]] = {}
        folded: dict[str, set[int]] = {}
        always: set[int] = set()
        for i, rule in enumerate(rules):
            if not rule.keywords:
                always.add(i)
            for k in rule.keywords:
                (folded if rule.ignore_case_keywords else exact).setdefault(
                    k.lower() if rule.ignore_case_keywords else k, set()).add(i)
        self.always = frozenset(always)
        self._exact = self._set(exact)
        self._folded = self._set(folded)

    @staticmethod
    def _set(keywords: dict[str, set[int]]) -> tuple[Any, list[frozenset[int]]] | None:
        if not keywords:
            return None
        s = re2.Set.SearchSet(re2.Options())
        ids = []
        for k, rules in keywords.items():
            s.Add(re2.escape(k))
            ids.append(frozenset(rules))
        s.Compile()
        return s, ids

    def rules_for(self, text: str) -> list[int]:
        enabled = set(self.always)
        for found, subject in ((self._exact, text), (self._folded, None)):
            if found is None:
                continue
            s, ids = found
            for hit in s.Match(text.lower() if subject is None else subject) or ():
                enabled |= ids[hit]
        return sorted(enabled)


_PREFILTERS: dict[tuple[int, ...], tuple[tuple[Rule, ...], _Prefilter]] = {}


def _prefilter_for(rules: tuple[Rule, ...]) -> _Prefilter:
    """One prefilter per rule tuple: building the keyword sets takes ~0.1 s, and every Redactor
    with the built-in rules shares them."""
    key = tuple(map(id, rules))
    hit = _PREFILTERS.get(key)
    if hit is None:
        if len(_PREFILTERS) > 32:
            _PREFILTERS.clear()
        hit = _PREFILTERS[key] = (rules, _Prefilter(rules))  # keeps the rules alive, so ids stay unique
    return hit[1]


class _Memo:
    """Recent results by input string, bounded in total characters. Agents resend the whole
    conversation every turn and the same memories come back on many recalls, so most strings
    a proxy scrubs it has scrubbed moments ago.

    Two generations of plain dicts, each at most half the bound: a hit in the older one moves to
    the newer, and when the newer fills it becomes the older (the oldest is let go). A lookup is
    one dict read, with no lock and no reordering (an LRU's bookkeeping was most of a hit's cost,
    and a turn looks up ~60 strings); writes are locked, as the async entry points scan in threads."""

    def __init__(self, max_chars: int = 4_000_000, max_item_chars: int = 64_000) -> None:
        self.max_chars = max_chars
        self.max_item_chars = max_item_chars
        self._new: dict[str, tuple[str, tuple[tuple[str, int], ...]]] = {}
        self._old: dict[str, tuple[str, tuple[tuple[str, int], ...]]] = {}
        self._chars = 0  # in the newer generation
        self._lock = threading.Lock()

    def get(self, text: str) -> tuple[str, tuple[tuple[str, int], ...]] | None:
        hit = self._new.get(text)
        if hit is None:
            hit = self._old.get(text)
            if hit is not None:
                self.put(text, hit)
        return hit

    def put(self, text: str, result: tuple[str, tuple[tuple[str, int], ...]]) -> None:
        if len(text) > self.max_item_chars:
            return
        with self._lock:
            if text in self._new:
                return
            self._new[text] = result
            self._chars += len(text) + len(result[0])
            if self._chars > self.max_chars // 2:
                self._old, self._new, self._chars = self._new, {}, 0


def _secret_span(m: Any, rule: Rule) -> tuple[int, int] | None:
    if rule.group is not None:
        s, e = m.span(rule.group)
        return (s, e) if s >= 0 and e > s else None
    n = rule.pattern.groups
    if n == 0:
        return m.span(0)
    for g in range(1, n + 1):
        s, e = m.span(g)
        if s >= 0 and e > s:
            return s, e
    return None


_LINE_WINDOW = 1024


def _line_around(text: str, start: int, end: int) -> str:
    """The line holding a match, at most _LINE_WINDOW characters either side of it: on one huge
    line with many matches, copying the whole line per match would make the scan quadratic."""
    lo = max(0, start - _LINE_WINDOW)
    hi = min(len(text), end + _LINE_WINDOW)
    left = text.rfind("\n", lo, start)
    right = text.find("\n", end, hi)
    return text[left + 1 if left >= 0 else lo: right if right >= 0 else hi]


def _under(value: Any, limit: int) -> bool:
    """Whether `value`'s strings sum to under `limit` characters. The compact JSON of a document is
    at least as long as its strings together (each character at least one byte), and orjson writes
    it in C, ~20x faster than walking the document in Python: most documents are answered by that
    length alone. Only a long one, or one orjson cannot write, is walked."""
    try:
        if len(orjson.dumps(value)) < limit:
            return True
    except (orjson.JSONEncodeError, TypeError):
        pass
    todo, total = [value], 0
    while todo:  # the strings summed until the limit is reached: a long history stops at its first long turns
        v = todo.pop()
        if isinstance(v, str):
            total += len(v)
            if total >= limit:
                return False
        elif isinstance(v, list):
            todo.extend(v)
        elif isinstance(v, dict):
            todo.extend(v.values())
    return True


_SENSITIVE, _SECRET_WORD = 1, 2
_KEY_KINDS: TextMemo[int] = TextMemo(entries=4096, key_chars=256)  # a JSON key -> its bits above


def _key_kind(key: str) -> int:
    """Whether a JSON key names a secret outright (`_SENSITIVE_KEY`) and whether it holds a secret
    word (`_SECRET_WORD_KEY`), remembered per key: a turn's documents carry ~50 keys, nearly all
    the same few (`role`, `content`, `model`), and two RE2 searches per key from Python cost more
    than the rest of the walk. Bounded: a document of endless distinct keys only refills it."""
    kind = _KEY_KINDS.get(key)
    if kind is None:
        kind = (_SENSITIVE if _SENSITIVE_KEY.search(key) else 0) | (_SECRET_WORD if _SECRET_WORD_KEY.search(key) else 0)
        _KEY_KINDS.put(key, kind)
    return kind


@dataclass
class Redactor:
    rules: tuple[Rule, ...] = field(default_factory=builtin_rules)
    allow: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        self._prefilter = _prefilter_for(self.rules)
        self._memo = _Memo()

    @staticmethod
    def is_large(value: Any) -> bool:
        """Whether scanning `value` belongs in a worker thread rather than on an event loop."""
        return not _under(value, ASYNC_THRESHOLD)

    def _allowed(self, secret: str) -> bool:
        return any(p.fullmatch(secret) for p in self.allow)

    # -- strings --

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

    async def text_async(self, text: str, counts: Counter[str] | None = None) -> tuple[str, Counter[str]]:
        """`text`, in a worker thread when the string is large, so the event loop keeps serving."""
        if len(text) < ASYNC_THRESHOLD:
            return self.text(text, counts)
        out, found = await asyncio.to_thread(self.text, text)
        return out, _merge(counts, found)

    def _scan(self, text: str, counts: Counter[str]) -> str:
        for i in self._prefilter.rules_for(text):
            text = self._apply(self.rules[i], text, counts)
        return text

    def _apply(self, rule: Rule, text: str, counts: Counter[str]) -> str:
        pieces: list[str] = []
        last = 0
        marker = f"{REDACTED_PREFIX}{rule.kind}]"
        for m in rule.pattern.finditer(text):
            span = _secret_span(m, rule)
            if span is not None and rule.refine is not None:
                span = rule.refine(text, *span)
            if span is None:
                continue
            spans = [span] if rule.inner is None else [
                (span[0] + a, span[0] + b) for a, b in
                (im.span(1) for im in rule.inner.finditer(text[span[0]:span[1]])) if b > a]
            for s, e in spans:
                if s < last or not self._is_secret(rule, text, m, s, e):
                    continue
                pieces.append(text[last:s])
                pieces.append(marker)
                last = e
                counts[rule.kind] += 1
        if not pieces:
            return text
        pieces.append(text[last:])
        return "".join(pieces)

    def _is_secret(self, rule: Rule, text: str, m: Any, s: int, e: int) -> bool:
        secret = text[s:e]
        if "redacted:" in secret or self._allowed(secret):
            return False
        if rule.check is not None and not rule.check(secret):
            return False
        if rule.inner is not None and looks_placeholder(secret):
            return False
        if rule.allowed is not None and rule.allowed(secret, m.group(0), _line_around(text, *m.span(0))):
            return False
        return not lookalike_allowed(rule.kind, text, s, e, _line_around)

    # -- JSON documents --

    def json(self, value: Any, counts: Counter[str] | None = None) -> tuple[Any, Counter[str]]:
        """Redact a decoded JSON value: sensitive keys lose their whole value, strings are scanned."""
        counts = counts if counts is not None else Counter()
        return self._walk(value, counts), counts

    async def json_async(self, value: Any, counts: Counter[str] | None = None) -> tuple[Any, Counter[str]]:
        """`json`, in a worker thread when the document's strings are large together."""
        if not self.is_large(value):
            return self.json(value, counts)
        out, found = await asyncio.to_thread(self.json, value)
        return out, _merge(counts, found)

    def _walk(self, value: Any, counts: Counter[str]) -> Any:
        if isinstance(value, str):
            return self.text(value, counts)[0]
        if isinstance(value, list):
            return [self._walk(v, counts) for v in value]
        if isinstance(value, dict):
            out = {}
            for key, v in value.items():
                if not isinstance(v, str):
                    out[key] = self._walk(v, counts) if isinstance(v, (list, dict)) else v
                    continue
                kind = _key_kind(key) if isinstance(key, str) else 0
                if not kind:
                    out[key] = self.text(v, counts)[0]
                elif kind & _SENSITIVE and not looks_placeholder(v) and not self._allowed(v):
                    scanned, found = self.text(v)
                    if found and set(found) != {"named_credential"}:  # a vendor's kind is named; else the whole field goes
                        counts.update(found)
                        out[key] = scanned
                    else:
                        counts["secret_field"] += 1
                        out[key] = f"{REDACTED_PREFIX}secret_field]"
                elif kind & _SECRET_WORD:
                    out[key] = self._keyed(key, v, counts)
                else:
                    out[key] = self.text(v, counts)[0]
            return out
        return value

    def _keyed(self, key: str, value: str, counts: Counter[str]) -> str:
        """A value under a key that names a secret (`vault_token`, `db_pass`) is scanned with its key,
        as in a YAML line, so keyed JSON is redacted like the same pair in YAML or an env file."""
        found: Counter[str] = Counter()
        alone = self.text(value, found)[0]
        if found:
            counts.update(found)
            return alone
        if key in ("key", "Key", "KEY") or not password_named(key) and not random_value(value, 8):
            return value  # a memory's `key`, a `cache_key`: a name, not a generated credential
        prefix = f"{key}: "
        both = self.text(prefix + value, found)[0]
        if found and both.startswith(prefix):
            counts.update(found)
            return both[len(prefix):]
        return value

    async def off_loop(self, subject: Any, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)` — work that redacts `subject` (for example turning a retained entry into
        memories) — in a worker thread when `subject` is large, else right here."""
        if not self.is_large(subject):
            return fn(*args)
        return await asyncio.to_thread(fn, *args)

    async def fields_async(self, key: str, value: str, metadata: dict[str, Any]
                           ) -> tuple[str, str, dict[str, Any], Counter[str]]:
        """A stored memory's key, value and metadata, redacted as one unit (REST writes)."""
        doc, counts = await self.json_async({"key": key, "value": value, "metadata": metadata})
        return doc["key"], doc["value"], doc["metadata"], counts

    # -- operator configuration --

    @classmethod
    def from_file(cls, path: str | Path | None) -> "Redactor":
        """Built-in rules plus an operator's YAML file of extra rules and allow-list patterns
        (RE2 syntax: no lookarounds or backreferences, so no rule can backtrack)."""
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
                pattern = compile_re2(spec["pattern"])
            except RuleError as exc:
                raise RedactionConfigError(f"{path}: field 'rules.{i}.pattern': not an RE2 pattern: {exc}") from None
            extra.append(Rule(spec["kind"], pattern, tuple(spec.get("keywords", ())), False,
                              int(spec.get("group", 0))))
        allow = []
        for i, pat in enumerate(doc.get("allow", [])):
            try:
                allow.append(compile_re2(pat))
            except RuleError as exc:
                raise RedactionConfigError(f"{path}: field 'allow.{i}': not an RE2 pattern: {exc}") from None
        # Operator rules run before the built-in ones so their kind name wins.
        return cls(rules=tuple(extra) + builtin_rules(), allow=tuple(allow))


def _merge(counts: Counter[str] | None, found: Counter[str]) -> Counter[str]:
    if counts is None:
        return found
    counts.update(found)
    return counts
