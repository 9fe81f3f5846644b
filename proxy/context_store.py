"""Per-agent context directories, read once and reloaded when their files change.

A bad memory.json disables memory for that agent (and is logged once per change); it never
takes the proxy or the agent's traffic down.
"""

from __future__ import annotations

import hmac
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from manifests.agents import token_digest
from manifests.models import AgentMetadata, MemoryManifest
from manifests.validate import ManifestError, load_json
from memplane_core.ids import is_agent_id
from memplane_core.telemetry import Telemetry


@dataclass(frozen=True)
class AgentContext:
    metadata: AgentMetadata
    memory: MemoryManifest | None

    @property
    def agent_id(self) -> str:
        return self.metadata.agent_id

    def memory_metadata(self, api: str, requested_model: Any, session_id: str | None,
                        project: str | None = None) -> dict[str, Any]:
        """The `metadata` object recall and retain send to the memory service (CONTRACT §5, §6)."""
        meta = self.metadata
        out = {"service": meta.service, "type": meta.type, "path": api, "requested_model": requested_model,
               "session_id": session_id, "timezone": meta.timezone,
               "project": project if meta.project_scope else None}
        return {k: v for k, v in out.items() if v is not None}


def _mtime(path: str | Path) -> int | None:
    try:
        return os.stat(path).st_mtime_ns
    except FileNotFoundError:
        return None


class ContextStore:
    def __init__(self, root: Path, telemetry: Telemetry) -> None:
        self.root = Path(root)
        self.telemetry = telemetry
        self._cache: dict[str, tuple[tuple[int | None, int | None], AgentContext | None]] = {}
        self._paths: dict[str, tuple[str, str]] = {}  # agent -> (metadata.json, memory.json)

    def get(self, agent_id: str) -> AgentContext | None:
        """The agent's context, or None when it does not exist or its metadata is invalid."""
        if not is_agent_id(agent_id):
            return None
        # the two paths as strings, kept per known agent: building them with pathlib on every turn
        # cost several times the two stat calls themselves
        paths = self._paths.get(agent_id)
        if paths is None:
            agent_dir = self.root / agent_id
            paths = (str(agent_dir / "metadata.json"), str(agent_dir / "memory.json"))
        stamp = (_mtime(paths[0]), _mtime(paths[1]))
        cached = self._cache.get(agent_id)
        if cached and cached[0] == stamp:
            return cached[1]
        ctx = self._load(self.root / agent_id, stamp)
        if ctx is not None:  # only known agents are cached: random ids cannot grow memory
            self._cache[agent_id] = (stamp, ctx)
            self._paths[agent_id] = paths
        else:
            self._cache.pop(agent_id, None)
            self._paths.pop(agent_id, None)
        return ctx

    def _load(self, agent_dir: Path, stamp: tuple[int | None, int | None]) -> AgentContext | None:
        if stamp[0] is None:
            return None
        try:
            meta = AgentMetadata.from_doc(load_json(agent_dir / "metadata.json", "metadata"))
        except (ManifestError, OSError) as exc:
            self.telemetry.warning("context_invalid", agent_dir=str(agent_dir), error=str(exc))
            return None
        if meta.agent_id != agent_dir.name:
            self.telemetry.warning("context_invalid", agent_dir=str(agent_dir),
                                   error="metadata.json agent_id does not match its directory")
            return None
        if stamp[1] is None:
            return AgentContext(meta, None)
        try:
            memory = MemoryManifest.from_doc(load_json(agent_dir / "memory.json", "memory"))
        except (ManifestError, OSError) as exc:
            self.telemetry.warning("memory_manifest_invalid", agent_id=meta.agent_id, error=str(exc))
            return AgentContext(meta, None)
        return AgentContext(meta, memory)

    def authenticate(self, token: str | None) -> AgentContext | None:
        """Resolve `<agent-id>:<secret>` to its context, comparing digests in constant time."""
        if not token or ":" not in token:
            return None
        agent_id = token.split(":", 1)[0]
        ctx = self.get(agent_id)
        if ctx is None:
            # Burn the same work as a real comparison so timing does not reveal agent ids.
            hmac.compare_digest(token_digest(token), "0" * 64)
            return None
        digest = token_digest(token)
        return ctx if hmac.compare_digest(digest, ctx.metadata.token_sha256) else None

    def agent_ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if (p / "metadata.json").exists())
