"""Proxy settings: one typed object built by the CLI from flags and env, passed to the app."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"
DEFAULT_ANTHROPIC_BASE_URL = "https://api.anthropic.com"
DEFAULT_HOME = Path(".memplane")  # `memplane up` keeps everything here
DEFAULT_CONTEXT_ROOT = DEFAULT_HOME / "context"
DEFAULT_HISTORY_ROOT = DEFAULT_HOME / "history"
DEFAULT_MEMORY_DIR = DEFAULT_HOME / "memory"


@dataclass
class ProxySettings:
    context_root: Path
    history_root: Path
    openai_base_url: str = DEFAULT_OPENAI_BASE_URL
    openai_api_key: str | None = None
    openai_organization: str | None = None  # the operator's, sent with the operator's key (never the agent's)
    openai_project: str | None = None
    anthropic_base_url: str = DEFAULT_ANTHROPIC_BASE_URL
    anthropic_api_key: str | None = None
    max_body_bytes: int = 10 * 1024 * 1024
    ledger_max_answer_bytes: int = 4 * 1024 * 1024  # what the ledger keeps of one answer (turn/answer_cap.py)
    upstream_connect_timeout_s: float = 10.0
    upstream_read_timeout_s: float = 600.0
    max_concurrent_upstream: int = 512
    max_concurrent_upstream_per_agent: int = 0  # one agent's share of them; 0 = a quarter (agent_shares.py)
    rate_limit_per_agent: float = 0.0  # requests per second, 0 = off
    rate_limit_burst: int = 20
    retain_queue_size: int = 10_000
    # retain delivery: entries a lane sends at once as concurrent retains / as one call to a batch
    # endpoint (also the shared ledger's read size), how long a partial batch waits for company, and
    # retains in flight across all agents (a slow service gets steady load, not a retry storm)
    retain_batch: int = 8
    retain_batch_call: int = 32
    retain_linger_s: float = 0.02
    retain_max_in_flight: int = 16
    redaction_rules: str | None = None
    shutdown_grace_s: float = 30.0
    ledger_fsync: bool = False
    passthrough: str | None = None  # None = forward_policy.DEFAULT_PASSTHROUGH
    admin_token: str | None = None  # opens /metrics and /memplane/*; unset = loopback only
    ledger: str = "file"  # file (one machine) | redis (shared by several proxies: ledger/redis_streams.py)
    redis_url: str | None = None  # the shared ledger's Redis (ledger = redis)
    ledger_prefix: str = "memplane"  # its key namespace
    retain_claim_idle_s: float = 30.0  # a dead proxy's pending retains are claimed after this idle time

    def __post_init__(self) -> None:
        self.context_root = Path(self.context_root)
        self.history_root = Path(self.history_root)
        self.openai_base_url = self.openai_base_url.rstrip("/")
        self.anthropic_base_url = self.anthropic_base_url.rstrip("/")


def operator_openai_ids(env: dict[str, str]) -> dict[str, str | None]:
    """The operator's OpenAI organisation and project, from `MEMPLANE_OPENAI_ORGANIZATION` /
    `MEMPLANE_OPENAI_PROJECT` or the openai SDK's own `OPENAI_ORG_ID` / `OPENAI_PROJECT_ID`."""
    return {"openai_organization": env.get("MEMPLANE_OPENAI_ORGANIZATION") or env.get("OPENAI_ORG_ID") or None,
            "openai_project": env.get("MEMPLANE_OPENAI_PROJECT") or env.get("OPENAI_PROJECT_ID") or None}


def default(name: str):
    """A setting's default, for the CLI's flags (so each default is written once, above)."""
    return ProxySettings.__dataclass_fields__[name].default
