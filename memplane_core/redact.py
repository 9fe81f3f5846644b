"""The import path every caller uses; the engine lives in `memplane_core.redaction`."""

from memplane_core.redaction import (ASYNC_THRESHOLD, GITLEAKS_VERSION, REDACTED_PREFIX, RedactionConfigError,
                                     Redactor, Rule, RuleError, builtin_rules, looks_placeholder, shannon_entropy)

__all__ = ["ASYNC_THRESHOLD", "GITLEAKS_VERSION", "REDACTED_PREFIX", "RedactionConfigError", "Redactor", "Rule",
           "RuleError", "builtin_rules", "looks_placeholder", "shannon_entropy"]
