"""One kind of secret as the engine runs it: an RE2 pattern, where the secret sits in a match,
keywords that must appear before the pattern is run at all, and checks that reject look-alikes."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import re2

_OPTIONS = re2.Options()
_OPTIONS.max_mem = 32 << 20  # a larger DFA cache for the long gitleaks alternations; still linear
_OPTIONS.log_errors = False  # a bad operator pattern is reported as RedactionConfigError, not on stderr


class RuleError(ValueError):
    """A pattern RE2 cannot compile (for example a lookaround or a backreference)."""


def compile_re2(regex: str) -> Any:
    try:
        return re2.compile(regex, _OPTIONS)
    except re2.error as exc:
        raise RuleError(str(exc)) from None


@dataclass(frozen=True)
class Rule:
    """`group`: the capture group holding the secret; None means the first non-empty group, or the
    whole match when the pattern has none (gitleaks' convention). `inner`: when set, each group-1
    match of it inside the secret is redacted instead of the whole secret (a Kubernetes `data:`
    block). `allowed(secret, match, line)`: the rule's own allowlist."""

    kind: str
    pattern: Any
    keywords: tuple[str, ...] = ()
    ignore_case_keywords: bool = False
    group: int | None = 0
    check: Callable[[str], bool] | None = None
    inner: Any = None
    allowed: Callable[[str, str, str], bool] | None = None
    # `refine(text, start, end)`: the secret's final span, or None when it is none (context decides)
    refine: Callable[[str, int, int], tuple[int, int] | None] | None = None


def rule(kind: str, regex: str, keywords: Iterable[str] = (), *, group: int | None = 0,
         check: Callable[[str], bool] | None = None, icase: bool = False, inner: str | None = None,
         refine: Callable[[str, int, int], tuple[int, int] | None] | None = None,
         allowed: Callable[[str, str, str], bool] | None = None) -> Rule:
    return Rule(kind, compile_re2(regex), tuple(k.lower() if icase else k for k in keywords), icase, group, check,
                compile_re2(inner) if inner else None, allowed=allowed, refine=refine)
