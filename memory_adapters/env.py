"""Settings from the environment, read once at start by a settings class (`tiered/config.py`,
`embedded/config.py`), never inside builders or the engine: a bad value is an error at start
that names the variable."""

from __future__ import annotations

import os


def env_str(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name} must be a whole number, not {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be a whole number of at least {minimum}, not {raw!r}")
    return value


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, not {raw!r}") from None
