"""Embedded adapter settings, read from the environment once, with documented defaults."""

from __future__ import annotations

from dataclasses import dataclass

from ..engine.schedule import PER_AGENT
from ..env import env_int, env_str


@dataclass
class EmbeddedSettings:
    embeddings: str = "auto"           # MEMPLANE_EMBEDDINGS: auto (the shipped MiniLM) | off
    encoder_threads: int = 1           # MEMPLANE_ENCODER_THREADS: ONNX Runtime threads for MiniLM
    max_memories_per_agent: int = 0    # MEMPLANE_MAX_MEMORIES_PER_AGENT: past it the oldest episodes go; 0 = no cap
    recalls_per_agent: int = PER_AGENT  # MEMPLANE_RECALLS_PER_AGENT: one agent's recalls in hand at once

    @classmethod
    def from_env(cls, **overrides) -> "EmbeddedSettings":
        s = cls(
            embeddings=env_str("MEMPLANE_EMBEDDINGS", cls.embeddings) or cls.embeddings,
            encoder_threads=env_int("MEMPLANE_ENCODER_THREADS", cls.encoder_threads) or cls.encoder_threads,
            max_memories_per_agent=env_int("MEMPLANE_MAX_MEMORIES_PER_AGENT", cls.max_memories_per_agent, minimum=0),
            recalls_per_agent=env_int("MEMPLANE_RECALLS_PER_AGENT", cls.recalls_per_agent, minimum=1),
        )
        for k, v in overrides.items():
            if v is not None:
                setattr(s, k, v)
        return s
