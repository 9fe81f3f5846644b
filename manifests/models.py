"""Typed views of the compiled per-agent files (CONTRACT §2)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memplane_core.contract import (
    DEFAULT_BUDGET_TOKENS,
    DEFAULT_MAX_BLOCKS,
    DEFAULT_RECALL_TIMEOUT_MS,
    DEFAULT_WRITE_TIMEOUT_MS,
)


# After everything the client sent: the prefix a provider cached stays byte-identical (CONTRACT §5).
DEFAULT_PLACEMENT = "trailing"
PLACEMENTS = ("trailing", "system", "latest", "search_results")


@dataclass(frozen=True)
class Endpoint:
    path: str
    timeout_ms: int
    batch_path: str | None = None  # retain only: memplane's batched retain, when the service has it


@dataclass(frozen=True)
class MemoryManifest:
    service: str
    base_url: str
    recall: Endpoint | None = None
    retain: Endpoint | None = None
    forget: Endpoint | None = None
    auth_token: str | None = None
    budget_tokens: int = DEFAULT_BUDGET_TOKENS
    max_blocks: int = DEFAULT_MAX_BLOCKS
    placement: str = DEFAULT_PLACEMENT
    tools: tuple[str, ...] = ()  # memory tools the proxy offers the model (proxy/memory_tool), opt-in
    grants: tuple[str, ...] = ()  # 'global': store_memory may write memories every agent sees, opt-in

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> "MemoryManifest":
        def endpoint(name: str, default_ms: int) -> Endpoint | None:
            spec = doc.get(name)
            if not spec:
                return None
            return Endpoint(spec["path"], int(spec.get("timeout_ms", default_ms)), spec.get("batch_path"))

        auth = doc.get("auth") or {}
        return cls(
            service=doc["service"],
            base_url=doc["base_url"].rstrip("/"),
            recall=endpoint("recall", DEFAULT_RECALL_TIMEOUT_MS),
            retain=endpoint("retain", DEFAULT_WRITE_TIMEOUT_MS),
            forget=endpoint("forget", DEFAULT_WRITE_TIMEOUT_MS),
            auth_token=auth.get("token") if auth.get("type", "bearer") == "bearer" else None,
            budget_tokens=int(doc.get("budget_tokens", DEFAULT_BUDGET_TOKENS)),
            max_blocks=int(doc.get("max_blocks", DEFAULT_MAX_BLOCKS)),
            placement=doc.get("placement", DEFAULT_PLACEMENT),
            tools=tuple(doc.get("tools") or ()),
            grants=tuple(doc.get("grants") or ()),
        )

    def url(self, endpoint: Endpoint) -> str:
        return self.base_url + endpoint.path

    def batch_url(self) -> str | None:
        return self.base_url + self.retain.batch_path if self.retain and self.retain.batch_path else None

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.auth_token}"} if self.auth_token else {}


@dataclass(frozen=True)
class AgentMetadata:
    agent_id: str
    token_sha256: str
    pod: str = ""
    service: str | None = None
    type: str | None = None
    timezone: str | None = None
    allowed_models: tuple[str, ...] = field(default_factory=tuple)
    provider_key: str = "operator"  # "client": the agent brings its own provider credential (CONTRACT §1)

    @property
    def client_provider_key(self) -> bool:
        return self.provider_key == "client"
    project_scope: bool = True  # coding agents: work memories scoped to the declared project
    project: str | None = None  # coding agents: the project when the client declares none

    @classmethod
    def from_doc(cls, doc: dict[str, Any]) -> "AgentMetadata":
        return cls(
            agent_id=doc["agent_id"],
            token_sha256=doc["token_sha256"],
            pod=doc.get("pod", ""),
            service=doc.get("service"),
            type=doc.get("type"),
            timezone=doc.get("timezone"),
            allowed_models=tuple(doc.get("allowed_models") or ()),
            provider_key=doc.get("provider_key") or "operator",
            project_scope=doc.get("project_scope", True) is not False,
            project=doc["project"] if isinstance(doc.get("project"), str) and doc["project"] else None,
        )
