"""Known non-secret shapes in their contexts, from `data/lookalikes.yaml`: each entry documents why
its values are not secrets. Applied after a rule's own checks, to the rule kinds the entry names."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

import yaml

from .rule import compile_re2

DATA_FILE = "lookalikes.yaml"
_BEFORE = 64
_LONGEST = 256


@dataclass(frozen=True)
class Lookalike:
    id: str
    kinds: frozenset[str]
    secret: Any
    line: Any
    before: Any
    why: str

    def allows(self, secret: str, line: Callable[[], str], before: str) -> bool:
        return ((self.secret is None or self.secret.fullmatch(secret) is not None)
                and (self.before is None or self.before.search(before) is not None)
                and (self.line is None or self.line.search(line()) is not None))


@cache
def lookalikes() -> dict[str, tuple[Lookalike, ...]]:
    """Entries by rule kind."""
    doc = yaml.safe_load(resources.files(__package__).joinpath("data", DATA_FILE).read_text())
    generic = set(doc["generic"])
    by_kind: dict[str, list[Lookalike]] = {}
    for e in doc["entries"]:
        kinds = set()
        for k in e["kinds"]:
            kinds |= generic if k == "generic" else {k}
        entry = Lookalike(e["id"], frozenset(kinds), *(compile_re2(e[f]) if e.get(f) else None
                                                       for f in ("secret", "line", "before")), e["why"])
        for k in kinds:
            by_kind.setdefault(k, []).append(entry)
    return {k: tuple(v) for k, v in by_kind.items()}


def allowed(kind: str, text: str, start: int, end: int, line_around: Callable[[str, int, int], str]) -> bool:
    """Whether `text[start:end]`, found by a rule of `kind`, is a documented look-alike. The line
    around it is cut only when an entry's other conditions hold (most candidates never need it)."""
    entries = lookalikes().get(kind)
    if not entries:
        return False
    secret = text[start:end]
    if len(secret) > _LONGEST:
        return False  # every documented look-alike is a short value (a hash, an id, a name)
    before = text[max(0, start - _BEFORE):start]
    line = cache(lambda: line_around(text, start, end))
    return any(e.allows(secret, line, before) for e in entries)
