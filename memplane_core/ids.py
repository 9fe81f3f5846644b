"""The agent-id rule, everywhere an agent id is read: contract bodies, context dirs, the CLI."""

from __future__ import annotations

import re

AGENT_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
_AGENT_ID = re.compile(AGENT_ID_PATTERN)


def is_agent_id(value: object) -> bool:
    """A path-safe agent id: no separators, no dot segments, at most 128 characters."""
    return isinstance(value, str) and _AGENT_ID.match(value) is not None
