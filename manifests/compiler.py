"""Compile a claw-style pod file (docker-compose + `x-claw` blocks) into per-agent context dirs.

Everything is resolved and validated in memory first; only a fully valid pod is written, into a
staging directory that then replaces the output, so an error never leaves partial output.
Tokens already issued are kept, so recompiling never locks running agents out.
"""

from __future__ import annotations

import json
import os
import posixpath
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from memplane_core.private_files import fresh_private_dir, write_private

from .agents import memory_manifest, read_token, write_agent
from .models import DEFAULT_RECALL_TIMEOUT_MS, DEFAULT_WRITE_TIMEOUT_MS
from .validate import ManifestError, validate

DEFAULT_PORT = 8080
DESCRIBE_FILE = ".claw-describe.json"
DESCRIBE_LABEL = "claw.describe"


class CompileError(ValueError):
    """A pod that cannot be compiled; the message names the file, agent/service and field."""


@dataclass
class CompiledAgent:
    agent_id: str
    service: str
    metadata_extra: dict[str, Any]
    memory: dict[str, Any] | None
    token: str | None = None
    new_token: bool = False


@dataclass
class CompileResult:
    pod: str
    agents: list[CompiledAgent] = field(default_factory=list)


def _fail(source: Path, where: str, message: str) -> CompileError:
    return CompileError(f"{source}: {where}: {message}")


def _labels(service: dict[str, Any]) -> dict[str, str]:
    labels = service.get("labels") or {}
    if isinstance(labels, list):
        return dict(str(item).split("=", 1) for item in labels if "=" in str(item))
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def _build_context(service: dict[str, Any], pod_dir: Path) -> Path | None:
    build = service.get("build")
    context = build if isinstance(build, str) else (build or {}).get("context") if isinstance(build, dict) else None
    return (pod_dir / context).resolve() if context else None


def _port(service: dict[str, Any]) -> int:
    for key in ("expose", "ports"):
        for item in service.get(key) or ():
            spec = item.get("target") if isinstance(item, dict) else str(item)
            text = str(spec).split("/")[0].rsplit(":", 1)[-1]
            if text.split("-")[0].isdigit():
                return int(text.split("-")[0])
    return DEFAULT_PORT


def _env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(str(item).split("=", 1) for item in env if "=" in str(item))
    return {str(k): "" if v is None else str(v) for k, v in env.items()} if isinstance(env, dict) else {}


class DescriptorUnavailable(Exception):
    """A descriptor URL did not give a descriptor; the message says why, for the operator."""


FetchDescriptor = Callable[[str], dict[str, Any]]  # a descriptor URL → its document


def load_descriptor(name: str, service: dict[str, Any], pod_dir: Path, overrides: dict[str, str],
                    source: Path, fetch: FetchDescriptor | None = None) -> tuple[dict[str, Any], str]:
    """Find and validate a memory service's descriptor; returns (descriptor, where it came from).
    A URL is read by `fetch` (the CLI's: the memory-service client), which this layer cannot import."""
    candidates: list[str] = []
    if name in overrides:
        candidates.append(overrides[name])
    else:
        label = _labels(service).get(DESCRIBE_LABEL)
        context = _build_context(service, pod_dir)
        if label:
            candidates += [str(context / label.lstrip("/"))] if context else []
            candidates.append(str(pod_dir / label.lstrip("/")))
        if context:
            candidates.append(str(context / DESCRIBE_FILE))
    for where in candidates:
        if where.startswith(("http://", "https://")):
            if fetch is None:
                raise _fail(source, f"service '{name}'", f"cannot fetch descriptor {where}: no fetcher given "
                                                          "(`memplane compile` fetches URLs)")
            try:
                doc = fetch(where)
            except DescriptorUnavailable as exc:
                raise _fail(source, f"service '{name}'", f"cannot fetch descriptor {where}: {exc}") from None
        else:
            path = Path(where)
            if not path.is_file():
                continue
            try:
                doc = json.loads(path.read_text())
            except json.JSONDecodeError as exc:
                raise _fail(source, f"service '{name}'", f"descriptor {where} is not valid JSON: {exc.msg}") from None
        try:
            validate("describe", doc, where)
        except ManifestError as exc:
            raise _fail(source, f"service '{name}'", f"invalid descriptor: {exc}") from None
        return doc, where
    tried = ", ".join(candidates) or f"no '{DESCRIBE_LABEL}' label, no build context"
    raise _fail(source, f"service '{name}'",
                f"no memory descriptor found (tried: {tried}); pass --describe {name}=PATH")


def offered_paths(descriptor: dict[str, Any]) -> dict[str, str]:
    """The memory capabilities a validated descriptor declares, each with its path (CONTRACT §3)."""
    memory = descriptor.get("memory") or {}
    return {k: v["path"] for k, v in memory.items() if k in ("recall", "retain", "forget")}


def retain_batch_path(descriptor: dict[str, Any]) -> str | None:
    """The batch retain endpoint a validated descriptor offers (memplane's extension), if any."""
    retain = (descriptor.get("memory") or {}).get("retain") or {}
    return retain.get("batch_path")


def offered(descriptor: dict[str, Any]) -> dict[str, Any]:
    """`memory_manifest`'s arguments for what a validated descriptor offers: each capability it
    declares at its path, and its batch retain path (a compiled agent's and `agent add`'s alike)."""
    paths = offered_paths(descriptor)
    return {"recall": "recall" in paths, "retain": "retain" in paths, "forget": "forget" in paths,
            "paths": paths, "retain_batch_path": retain_batch_path(descriptor)}


def _timeout(value: Any, source: Path, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 600_000:
        raise _fail(source, where, f"timeout-ms must be an integer from 1 to 600000, got {value!r}")
    return value


def plan(pod_file: Path, *, pod_dir: Path | None = None, describe: dict[str, str] | None = None,
         fetch: FetchDescriptor | None = None) -> CompileResult:
    """Resolve and validate the whole pod without writing anything; `fetch` reads descriptor URLs."""
    pod_file = Path(pod_file)
    pod_dir = Path(pod_dir) if pod_dir else pod_file.parent
    doc = _read_pod(pod_file)
    pod, services, defaults = _pod_settings(doc, pod_file, pod_dir)
    result = CompileResult(pod)
    seen: dict[str, str] = {}
    descriptors: dict[str, tuple[dict[str, Any], str]] = {}
    for name, service in services.items():
        claw = (service or {}).get("x-claw")
        if claw is None:
            continue
        where = f"services.{name}.x-claw"
        if not isinstance(claw, dict):
            raise _fail(pod_file, where, "must be a mapping")
        agent_id = _agent_id(claw, name, seen, pod_file, where)
        mem_spec = claw.get("memory", defaults)
        if mem_spec is False or mem_spec is None or mem_spec == "none":
            memory = None
        else:
            if not isinstance(mem_spec, dict):
                raise _fail(pod_file, f"{where}.memory", f"agent '{agent_id}': memory must be a mapping")
            memory = _memory_for(agent_id, {**(defaults or {}), **mem_spec}, services, pod_dir, describe or {},
                                 pod_file, f"{where}.memory", descriptors, fetch)
        result.agents.append(CompiledAgent(agent_id, name, _agent_extra(claw, name, agent_id, pod_file, where), memory))
    return result


def _read_pod(pod_file: Path) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(pod_file.read_text())
    except OSError as exc:
        raise CompileError(f"{pod_file}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise CompileError(f"{pod_file}: invalid YAML: {exc}") from None
    if not isinstance(doc, dict):
        raise _fail(pod_file, "<root>", "a pod file must be a YAML mapping (a docker-compose file)")
    return doc


def _pod_settings(doc: dict[str, Any], pod_file: Path, pod_dir: Path
                  ) -> tuple[str, dict[str, Any], dict[str, Any] | None]:
    """The pod's name, its compose services and the memory defaults every agent starts from."""
    pod_claw = doc.get("x-claw") or {}
    if not isinstance(pod_claw, dict):
        raise _fail(pod_file, "x-claw", "must be a mapping")
    services = doc.get("services")
    if not isinstance(services, dict) or not services:
        raise _fail(pod_file, "services", "must be a non-empty mapping of compose services")
    defaults = pod_claw.get("memory-defaults")
    if defaults is not None and not isinstance(defaults, dict):
        raise _fail(pod_file, "x-claw.memory-defaults", "must be a mapping")
    return str(pod_claw.get("pod") or pod_dir.resolve().name), services, defaults


def _agent_id(claw: dict[str, Any], name: str, seen: dict[str, str], pod_file: Path, where: str) -> str:
    """The agent's id (default: the service's name), valid and used once in the pod."""
    agent_id = str(claw.get("agent-id") or name)
    try:
        validate("metadata", {"agent_id": agent_id, "token_sha256": "0" * 64}, str(pod_file))
    except ManifestError:
        raise _fail(pod_file, f"{where}.agent-id", f"agent '{agent_id}': invalid agent id") from None
    if agent_id in seen:
        raise _fail(pod_file, where, f"duplicate agent id '{agent_id}' (also used by service '{seen[agent_id]}')")
    seen[agent_id] = name
    return agent_id


def _agent_extra(claw: dict[str, Any], name: str, agent_id: str, pod_file: Path, where: str) -> dict[str, Any]:
    """What metadata.json carries besides the id: the service, type, timezone, allowed models, whose
    provider key goes upstream (`provider-key: client`: the agent's own, CONTRACT §1) and whether a
    coding agent's work is scoped to its project (`project-scope`, default on) and its default project
    when the client declares none (`project`)."""
    extra: dict[str, Any] = {"service": name}
    for key in ("type", "timezone"):
        if claw.get(key):
            extra[key] = str(claw[key])
    scope = claw.get("project-scope")
    if scope is not None:
        if not isinstance(scope, bool):
            raise _fail(pod_file, f"{where}.project-scope", f"agent '{agent_id}': project-scope must be true or false")
        extra["project_scope"] = scope
    project = claw.get("project")
    if project is not None:
        name = " ".join(project.split())[:512] if isinstance(project, str) else ""
        if name.startswith("/"):
            name = posixpath.normpath(name)
        if not name:
            raise _fail(pod_file, f"{where}.project", f"agent '{agent_id}': project must be a non-empty name")
        extra["project"] = name
    models = claw.get("models", claw.get("allowed-models"))
    if models is not None:
        if not isinstance(models, list) or not all(isinstance(m, str) and m for m in models):
            raise _fail(pod_file, f"{where}.models", f"agent '{agent_id}': models must be a list of model names")
        if models:
            extra["allowed_models"] = list(models)
    provider_key = claw.get("provider-key", claw.get("provider_key"))
    if provider_key is not None:
        if provider_key not in ("operator", "client"):
            raise _fail(pod_file, f"{where}.provider-key",
                        f"agent '{agent_id}': provider-key must be 'operator' or 'client'")
        if provider_key == "client":
            extra["provider_key"] = "client"
    return extra


def _memory_for(agent_id: str, spec: dict[str, Any], services: dict[str, Any], pod_dir: Path,
                describe: dict[str, str], source: Path, where: str,
                descriptors: dict[str, tuple[dict[str, Any], str]],
                fetch: FetchDescriptor | None = None) -> dict[str, Any]:
    svc_name = spec.get("service")
    if not svc_name:
        raise _fail(source, f"{where}.service", f"agent '{agent_id}': no memory service named")
    svc = services.get(svc_name)
    if not isinstance(svc, dict):
        raise _fail(source, f"{where}.service",
                    f"agent '{agent_id}': memory service '{svc_name}' is not a service in this pod")
    if svc_name not in descriptors:
        descriptors[svc_name] = load_descriptor(svc_name, svc, pod_dir, describe, source, fetch)
    desc, desc_where = descriptors[svc_name]
    offer = offered(desc)
    if not offer["paths"]:
        raise _fail(source, f"{where}.service",
                    f"agent '{agent_id}': service '{svc_name}' declares no memory capability ({desc_where})")
    timeout = _timeout(spec.get("timeout-ms", DEFAULT_RECALL_TIMEOUT_MS), source, f"{where}.timeout-ms")
    token = spec.get("auth-token") or _env(svc).get("MEMPLANE_ADAPTER_TOKEN") or None
    doc = memory_manifest(svc_name, f"http://{svc_name}:{_port(svc)}", recall_timeout_ms=timeout,
                          write_timeout_ms=max(timeout, DEFAULT_WRITE_TIMEOUT_MS), auth_token=token, **offer)
    for key, out in (("budget-tokens", "budget_tokens"), ("placement", "placement"), ("max-blocks", "max_blocks"),
                     ("tools", "tools"), ("grants", "grants")):
        if key in spec:
            doc[out] = spec[key]
    try:
        validate("memory", doc, f"{source} ({where})")
    except ManifestError as exc:
        raise _fail(source, where, f"agent '{agent_id}': {exc}") from None
    return doc


OUT_MARKER = ".memplane-compiled"


def compile_pod(pod_file: Path, out: Path, *, pod_dir: Path | None = None,
                describe: dict[str, str] | None = None, fetch: FetchDescriptor | None = None) -> CompileResult:
    """Plan, then write every agent dir into a staging dir that replaces `out` in one step."""
    result = plan(pod_file, pod_dir=pod_dir, describe=describe, fetch=fetch)
    out = Path(out)
    if out.resolve() in (Path.cwd().resolve(), Path(pod_file).resolve().parent) or out.name in ("", ".", ".."):
        raise CompileError(f"--out {out}: give a directory of its own for the compiled agents, "
                           "not the current or the pod file's directory")
    if out.is_symlink():
        raise CompileError(f"--out {out}: is a symlink; give a real directory")
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not (out / OUT_MARKER).exists())):
        raise CompileError(f"--out {out}: exists and was not made by `memplane compile` (no {OUT_MARKER}); "
                           "refusing to replace it")
    # staged in a fresh 0700 directory of its own, which becomes `out`: the compiled root lists the
    # pod's agents, and a fixed name beside `out` could be a symlink planted there
    staging = fresh_private_dir(out.parent, f".{out.name}.staging-")
    old = None
    try:
        for agent in result.agents:
            existing = read_token(out / agent.agent_id / "token")
            agent.token, created = write_agent(staging, agent.agent_id, pod=result.pod, memory=agent.memory,
                                               extra=agent.metadata_extra, token=existing)
            agent.new_token = created
        write_private(staging / OUT_MARKER, b"made by memplane compile; the whole directory is replaced on recompile\n")
        if out.exists():
            old = fresh_private_dir(out.parent, f".{out.name}.old-")
            os.replace(out, old)  # a directory renamed onto an empty one replaces it
        os.replace(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    return result
