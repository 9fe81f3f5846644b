"""Tiered adapter settings, read from the environment once, with documented defaults."""

from __future__ import annotations

from dataclasses import dataclass

from memplane_core.contract import DEFAULT_BUDGET_TOKENS

from ..engine.schedule import PER_AGENT
from ..env import env_float, env_int, env_str
from ..http.admission import DEFAULT_MAX_RETAINS_IN_FLIGHT
from ..http.auth import AgentToken, load_agent_tokens


@dataclass
class TieredSettings:
    redis_url: str = "redis://127.0.0.1:6379/0"
    mongo_url: str = "mongodb://127.0.0.1:27017/memplane"
    stm_max_entries: int = 20          # STM_MAX_ENTRIES: newest memories per agent kept in Redis
    ltm_max_entries: int = 0           # LTM_MAX_ENTRIES: memories per agent in MongoDB, 0 = unlimited (default)
    recall_budget_tokens: int = DEFAULT_BUDGET_TOKENS   # RECALL_BUDGET_TOKENS
    consolidation_threshold: float = 0.1  # CONSOLIDATION_THRESHOLD: prune below this composite importance
    consolidate_every_s: float = 0.0   # CONSOLIDATE_EVERY_S: periodic consolidation, 0 = off
    adapter_token: str | None = None   # MEMPLANE_ADAPTER_TOKEN: bearer token required on every call
    key_prefix: str = "memplane"       # MEMPLANE_REDIS_PREFIX: Redis key namespace
    embeddings: str = "auto"           # MEMPLANE_EMBEDDINGS: auto | off
    encoder_threads: int = 1           # MEMPLANE_ENCODER_THREADS: ONNX Runtime threads for MiniLM
    agent_tokens: dict[str, AgentToken] | None = None  # MEMPLANE_ADAPTER_AGENT_TOKENS: JSON file {agent_id: token}
    max_retains_in_flight: int = DEFAULT_MAX_RETAINS_IN_FLIGHT  # MEMPLANE_MAX_RETAINS_IN_FLIGHT: then 503 + Retry-After
    index_cache_mb: int = 0            # MEMPLANE_INDEX_CACHE_MB: LRU budget over agents' in-memory indexes, 0 = unbounded
    recalls_per_agent: int = PER_AGENT  # MEMPLANE_RECALLS_PER_AGENT: one agent's recalls in hand at once

    @classmethod
    def from_env(cls, **overrides) -> "TieredSettings":
        s = cls(
            redis_url=env_str("MEMPLANE_REDIS_URL", cls.redis_url),
            mongo_url=env_str("MEMPLANE_MONGO_URL", cls.mongo_url),
            stm_max_entries=env_int("STM_MAX_ENTRIES", cls.stm_max_entries),
            ltm_max_entries=env_int("LTM_MAX_ENTRIES", cls.ltm_max_entries),
            recall_budget_tokens=env_int("RECALL_BUDGET_TOKENS", cls.recall_budget_tokens),
            consolidation_threshold=env_float("CONSOLIDATION_THRESHOLD", cls.consolidation_threshold),
            consolidate_every_s=env_float("CONSOLIDATE_EVERY_S", cls.consolidate_every_s),
            adapter_token=env_str("MEMPLANE_ADAPTER_TOKEN") or None,
            key_prefix=env_str("MEMPLANE_REDIS_PREFIX", cls.key_prefix),
            embeddings=env_str("MEMPLANE_EMBEDDINGS", cls.embeddings),
            encoder_threads=env_int("MEMPLANE_ENCODER_THREADS", cls.encoder_threads),
            agent_tokens=load_agent_tokens(env_str("MEMPLANE_ADAPTER_AGENT_TOKENS")),
            max_retains_in_flight=env_int("MEMPLANE_MAX_RETAINS_IN_FLIGHT", cls.max_retains_in_flight),
            index_cache_mb=env_int("MEMPLANE_INDEX_CACHE_MB", cls.index_cache_mb),
            recalls_per_agent=env_int("MEMPLANE_RECALLS_PER_AGENT", cls.recalls_per_agent, minimum=1),
        )
        for k, v in overrides.items():
            if v is not None:
                setattr(s, k, v)
        return s
