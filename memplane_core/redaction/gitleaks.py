"""gitleaks' default rule set (MIT, pinned in data/gitleaks.toml) as engine rules.

Go's regexp is RE2 syntax, so every pattern compiles unchanged. What gitleaks does around a match
is kept too: lower-case `keywords` as the prefilter, `secretGroup` (else the first non-empty
group), `entropy` (and, for the generic rules, at least one digit), and the global and per-rule
allowlists (regexes on the secret, the match or the line; stopwords; OR/AND conditions). File
path allowlists have no meaning for a chat message and are ignored; an allowlist that needs a
path match therefore never applies."""

from __future__ import annotations

import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import re2

from .checks import looks_placeholder, shannon_entropy
from .named import names_a_thing
from .rule import Rule, compile_re2

GITLEAKS_VERSION = "8.30.1"
DATA_FILE = "gitleaks.toml"


@dataclass(frozen=True)
class _Allowlist:
    target: str                   # secret | match | line
    regexes: tuple[Any, ...]
    stopwords: Any                # an RE2 set of the lower-case stopwords (one call, not ~1,500)
    condition_and: bool
    needs_path: bool

    def allows(self, secret: str, match: str, line: str) -> bool:
        if self.needs_path and self.condition_and:
            return False
        text = {"match": match, "line": line}.get(self.target, secret)
        checks = []
        if self.regexes:
            checks.append(any(r.search(text) for r in self.regexes))
        if self.stopwords is not None:
            checks.append(bool(self.stopwords.Match(secret.lower())))
        if not checks:
            return False
        return all(checks) if self.condition_and else any(checks)


def _word_set(words: Any) -> Any:
    if not words:
        return None
    found = re2.Set.SearchSet(re2.Options())
    for w in words:
        found.Add(re2.escape(w.lower()))
    found.Compile()
    return found


def _allowlist(spec: dict[str, Any]) -> _Allowlist:
    regexes = spec.get("regexes", ())
    # one RE2 alternation per list: a match is checked against it in one call, not one per regex
    joined = (compile_re2("|".join(f"(?:{r})" for r in regexes)),) if regexes else ()
    return _Allowlist(spec.get("regexTarget", "secret"), joined, _word_set(spec.get("stopwords", ())),
                      str(spec.get("condition", "OR")).upper() == "AND", bool(spec.get("paths")))


def _make_check(rule_id: str, entropy: float, lists: tuple[_Allowlist, ...]
                ) -> tuple[Callable[[str], bool], Callable[[str, str, str], bool]]:
    generic = rule_id.startswith("generic")

    def check(secret: str) -> bool:
        if entropy and shannon_entropy(secret) <= entropy:
            return False
        if generic and not any(c.isdigit() for c in secret):
            return False
        return not looks_placeholder(secret)

    def allowed(secret: str, match: str, line: str) -> bool:
        if generic and names_a_thing(secret, match, line):
            return True  # `api_key = "tailscale-prod-v2"`: a name, not a generated key (named.py)
        return any(a.allows(secret, match, line) for a in lists)

    return check, allowed


def kind_of(rule_id: str) -> str:
    return rule_id.lower().replace("-", "_")


@cache
def gitleaks_rules() -> tuple[Rule, ...]:
    """Every regex rule of the pinned data file, in file order."""
    doc = tomllib.loads(resources.files(__package__).joinpath("data", DATA_FILE).read_text())
    global_lists = tuple(_allowlist(a) for a in [doc.get("allowlist", {})] + doc.get("allowlists", []))
    out = []
    for spec in doc["rules"]:
        if "regex" not in spec:  # path-only rules (pkcs12 files) mean nothing in a message
            continue
        lists = global_lists + tuple(_allowlist(a) for a in spec.get("allowlists", ()))
        check, allowed = _make_check(spec["id"], float(spec.get("entropy", 0.0)), lists)
        group = spec.get("secretGroup")
        out.append(Rule(kind_of(spec["id"]), compile_re2(spec["regex"]), tuple(k.lower() for k in spec.get("keywords", ())),
                        True, int(group) if group else None, check, None, allowed))
    return tuple(out)
