"""Secret redaction: one engine for recall policy, retain scrubbing and adapter storage.

`engine` runs the rules (RE2, keyword prefilter, memo, async entry points), `overlay` holds
memplane's own rules, `gitleaks` loads the pinned community rule set from `data/`."""

from .checks import REDACTED_PREFIX, looks_placeholder, shannon_entropy
from .engine import ASYNC_THRESHOLD, RedactionConfigError, Redactor, builtin_rules
from .gitleaks import GITLEAKS_VERSION
from .rule import Rule, RuleError

__all__ = ["ASYNC_THRESHOLD", "GITLEAKS_VERSION", "REDACTED_PREFIX", "RedactionConfigError", "Redactor", "Rule",
           "RuleError", "builtin_rules", "looks_placeholder", "shannon_entropy"]
