"""Create agent context directories: metadata.json with a token digest, optional memory.json.

Used by `memplane agent add`, `memplane up` and the pod compiler, so every path that makes
an agent writes the same files the same way.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from pathlib import Path
from typing import Any

from memplane_core.private_files import private_dir, write_private

from .models import DEFAULT_PLACEMENT, DEFAULT_RECALL_TIMEOUT_MS, DEFAULT_WRITE_TIMEOUT_MS


def token_digest(token: str) -> str:
    """What metadata.json keeps of an agent's token (`token_sha256`); the token itself is never stored."""
    return hashlib.sha256(token.encode()).hexdigest()


def new_token(agent_id: str) -> str:
    return f"{agent_id}:{secrets.token_urlsafe(32)}"


def write_json(path: Path, doc: dict[str, Any], mode: int = 0o600) -> None:
    """Write atomically (a fresh temp file + rename) so a reloading proxy never reads half a file
    and a planted symlink is never written through."""
    write_private(path, (json.dumps(doc, indent=2) + "\n").encode(), mode)


def write_token(path: Path, token: str) -> None:
    write_private(path, (token + "\n").encode())


def read_token(path: Path) -> str | None:
    try:
        return path.read_text().strip() or None
    except FileNotFoundError:
        return None


def memory_manifest(service: str, base_url: str, *, recall: bool = True, retain: bool = True,
                    forget: bool = True, recall_timeout_ms: int = DEFAULT_RECALL_TIMEOUT_MS,
                    write_timeout_ms: int = DEFAULT_WRITE_TIMEOUT_MS, auth_token: str | None = None,
                    paths: dict[str, str] | None = None,
                    retain_batch_path: str | None = None, placement: str = DEFAULT_PLACEMENT) -> dict[str, Any]:
    """A memory.json; new agents get the cache-keeping placement written out (`trailing`)."""
    paths = paths or {}
    doc: dict[str, Any] = {"version": 1, "service": service, "base_url": base_url.rstrip("/")}
    if recall:
        doc["recall"] = {"path": paths.get("recall", "/recall"), "timeout_ms": recall_timeout_ms}
    if retain:
        doc["retain"] = {"path": paths.get("retain", "/retain"), "timeout_ms": write_timeout_ms}
        if retain_batch_path:
            doc["retain"]["batch_path"] = retain_batch_path
    if forget:
        doc["forget"] = {"path": paths.get("forget", "/forget"), "timeout_ms": write_timeout_ms}
    if auth_token:
        doc["auth"] = {"type": "bearer", "token": auth_token}
    if recall:
        doc["placement"] = placement
    return doc


def write_agent(context_root: Path, agent_id: str, *, pod: str = "",
                memory: dict[str, Any] | None = None, extra: dict[str, Any] | None = None,
                token: str | None = None) -> tuple[str, bool]:
    """Write an agent's dir. Keeps an existing token; returns (token, created_new_token)."""
    agent_dir = private_dir(Path(context_root) / agent_id)
    token_file = agent_dir / "token"
    existing = token or read_token(token_file)
    created = existing is None
    token = existing or new_token(agent_id)
    write_token(token_file, token)
    meta = {"agent_id": agent_id, "pod": pod, "token_sha256": token_digest(token)}
    meta.update(extra or {})
    write_json(agent_dir / "metadata.json", meta)
    manifest_path = agent_dir / "memory.json"
    if memory is not None:
        write_json(manifest_path, memory, mode=0o600)
    elif manifest_path.exists():
        manifest_path.unlink()
    return token, created


def ensure_local_agent(context_root: Path, agent_id: str, memory: dict[str, Any], *,
                       pod: str = "local") -> tuple[str, bool]:
    """`memplane up`'s agent: made on first run; afterwards its files stay as the operator left them
    (`tools`, `placement`, `allowed_models`, … edited by hand) and only an existing memory.json of the
    same service is pointed at the engine this run serves (its port may have moved). (token, created)."""
    agent_dir = Path(context_root) / agent_id
    token = read_token(agent_dir / "token")
    if token is None or not (agent_dir / "metadata.json").exists():
        return write_agent(context_root, agent_id, pod=pod, memory=memory)
    manifest_path = agent_dir / "memory.json"
    try:
        current = json.loads(manifest_path.read_text())
    except (FileNotFoundError, ValueError):
        return token, False  # no memory on purpose, or a file the proxy reports as invalid: left alone
    if isinstance(current, dict) and current.get("service") == memory["service"] \
            and current.get("base_url") != memory["base_url"]:
        write_json(manifest_path, {**current, "base_url": memory["base_url"]})
    return token, False

