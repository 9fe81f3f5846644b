"""Token estimates, as the proxy's budget counts them and services pack to fit it."""

from __future__ import annotations


def estimate_tokens(text: str) -> int:
    """~4 characters per token: the usual English estimate, cheap and stable."""
    return (len(text) + 3) // 4
