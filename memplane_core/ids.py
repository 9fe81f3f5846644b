"""The agent-id rule, everywhere an agent id is read: contract bodies, context dirs, the CLI."""

from __future__ import annotations

import re

# For pydantic (Rust regex) and JSON Schema (ECMA 262), where `$` is the end of the text.
AGENT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
# For Python's `re` (jsonschema's `pattern` runs `re.search`), where `$` also matches before a
# trailing newline: `(?!\n)` refuses "alice\n" there and changes nothing in ECMA 262.
AGENT_ID_SCHEMA_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}(?!\n)$"
_AGENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def is_agent_id(value: object) -> bool:
    """A path-safe agent id: no separators, no dot segments, at most 128 characters, nothing after
    (a full match: "alice\n" is not an agent id)."""
    return isinstance(value, str) and _AGENT_ID.fullmatch(value) is not None
