"""An optional LLM curator (off by default): directives and facts extracted from turns,
consolidated, and recalled ahead of episodes.

* `config.py` settings (`MEMPLANE_CURATOR_*`); `llm_client.py` the one way to the model;
* `schema.py` the structured answers; `window.py` when to extract; `extraction.py` turns → memories;
* `consolidation.py` merge, supersede, prune; `budget.py` and `metrics.py` cost, per agent and total;
* `recall.py` the leading block of directives and current facts; `curator.py` the worker.

The services (embedded, tiered) build one with `build_curator` and hand it new episodes; the
engine's deterministic path is unchanged when it is off.
"""

from __future__ import annotations

from typing import Any

from memplane_core.telemetry import Telemetry

from .config import CuratorSettings
from .curator import Curator


def build_curator(store: Any, telemetry: Telemetry, settings: CuratorSettings) -> Curator | None:
    """A curator over `store` (a MemoryRest) when the settings turn it on."""
    if not settings.on:
        return None
    telemetry.info("curator_on", mode=settings.mode, model=settings.model if settings.llm_on else None,
                   daily_tokens=settings.daily_tokens)
    return Curator(settings, store, telemetry)


__all__ = ["Curator", "CuratorSettings", "build_curator"]
