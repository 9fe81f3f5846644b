"""Curator settings: off unless the operator names an OpenAI-compatible endpoint and a model.

Every knob has an environment variable (`MEMPLANE_CURATOR_*`) and a default taken from the
issue's targets (extract every ~45 messages or ~1,000 tokens, at least 4 messages apart).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace
from typing import Literal

Mode = Literal["off", "deterministic", "llm"]


@dataclass(frozen=True)
class CuratorSettings:
    base_url: str | None = None        # MEMPLANE_CURATOR_BASE_URL: an OpenAI-compatible /v1 endpoint
    api_key: str | None = None         # MEMPLANE_CURATOR_API_KEY (may be an agent token of memplane's own proxy)
    model: str | None = None           # MEMPLANE_CURATOR_MODEL
    mode: Mode = "off"                 # MEMPLANE_CURATOR: off | deterministic | llm (llm when base URL + model set)
    every_messages: float = 45         # MEMPLANE_CURATOR_EVERY_MESSAGES: weighted messages that trigger extraction
    every_tokens: int = 1000           # MEMPLANE_CURATOR_EVERY_TOKENS: weighted tokens that trigger extraction
    min_messages: int = 4              # MEMPLANE_CURATOR_MIN_MESSAGES: never extract fewer new messages than this
    user_weight: float = 1.0           # a user message counts this much toward the thresholds
    agent_weight: float = 0.5          # an agent (assistant) message counts this much
    daily_tokens: int = 200_000        # MEMPLANE_CURATOR_DAILY_TOKENS: per agent per UTC day, then it pauses
    interval_s: float = 2.0            # MEMPLANE_CURATOR_INTERVAL_S: how often the worker looks for due work
    consolidate_every_s: float = 600   # MEMPLANE_CURATOR_CONSOLIDATE_EVERY_S: consolidation of touched agents
    prune_below: float = 0.1           # MEMPLANE_CURATOR_PRUNE_BELOW: composite importance pruned (after 30 days)
    timeout_s: float = 60              # MEMPLANE_CURATOR_TIMEOUT_S: one LLM call
    retry_after_s: float = 30          # MEMPLANE_CURATOR_RETRY_AFTER_S: first wait after a failed extraction
    max_window_messages: int = 120     # the most messages sent in one extraction call

    @property
    def llm_on(self) -> bool:
        return self.mode == "llm" and bool(self.base_url and self.model)

    @property
    def on(self) -> bool:
        return self.mode != "off"

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides) -> "CuratorSettings":
        env = os.environ if env is None else env
        given: dict = {}
        names = {"base_url": "BASE_URL", "api_key": "API_KEY", "model": "MODEL",
                 "every_messages": "EVERY_MESSAGES", "every_tokens": "EVERY_TOKENS", "min_messages": "MIN_MESSAGES",
                 "daily_tokens": "DAILY_TOKENS", "interval_s": "INTERVAL_S",
                 "consolidate_every_s": "CONSOLIDATE_EVERY_S", "prune_below": "PRUNE_BELOW",
                 "timeout_s": "TIMEOUT_S", "retry_after_s": "RETRY_AFTER_S"}
        types = {f.name: f.type for f in fields(cls)}
        for attr, suffix in names.items():
            raw = env.get(f"MEMPLANE_CURATOR_{suffix}")
            if raw in (None, ""):
                continue
            kind = types[attr]
            try:
                given[attr] = int(raw) if kind == "int" else float(raw) if kind == "float" else raw
            except ValueError:
                raise ValueError(f"MEMPLANE_CURATOR_{suffix}: not a number: {raw!r}") from None
        given.update({k: v for k, v in overrides.items() if v is not None})
        mode = given.get("mode") or env.get("MEMPLANE_CURATOR") or ""
        if not mode:
            mode = "llm" if given.get("base_url") and given.get("model") else "off"
        if mode not in ("off", "deterministic", "llm"):
            raise ValueError(f"MEMPLANE_CURATOR: must be off, deterministic or llm, not {mode!r}")
        if mode == "llm" and not (given.get("base_url") and given.get("model")):
            raise ValueError("MEMPLANE_CURATOR=llm needs MEMPLANE_CURATOR_BASE_URL and MEMPLANE_CURATOR_MODEL")
        given["mode"] = mode
        out = replace(cls(), **given)
        for attr in ("every_messages", "every_tokens", "min_messages", "daily_tokens", "consolidate_every_s",
                     "prune_below", "retry_after_s"):
            if getattr(out, attr) < 0:
                raise ValueError(f"curator setting {attr} must not be negative")
        if out.interval_s < 0.01 or out.timeout_s <= 0:
            raise ValueError("curator interval_s must be at least 0.01 s and timeout_s positive")
        return out
