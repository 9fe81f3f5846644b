"""Operator commands: `memplane compile`, `memplane memory forget|backfill`, `memplane audit`."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import click
import orjson

from proxy.config import DEFAULT_CONTEXT_ROOT, DEFAULT_HISTORY_ROOT

CONTEXT_ROOT = click.option("--context-root", type=click.Path(path_type=Path), default=DEFAULT_CONTEXT_ROOT,
                            show_default=True, envvar="MEMPLANE_CONTEXT_ROOT")
HISTORY_ROOT = click.option("--history-root", type=click.Path(path_type=Path), default=DEFAULT_HISTORY_ROOT,
                            show_default=True, envvar="MEMPLANE_HISTORY_ROOT")


@click.command("compile")
@click.argument("pod_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--out", type=click.Path(path_type=Path), required=True, help="Context root to write.")
@click.option("--pod-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Directory build contexts are relative to (default: the pod file's).")
@click.option("--describe", "describes", multiple=True, metavar="SERVICE=PATH|URL",
              help="Descriptor for a memory service: a file path, its http(s) URL, or the service's base URL "
                   "(its /.claw-describe.json is read). Repeatable.")
@click.option("--print-env", is_flag=True, help="Print the OPENAI_BASE_URL/OPENAI_API_KEY lines per agent.")
@click.option("--proxy-url", default="http://memplane:8080", show_default=True,
              help="The proxy URL agents reach (for --print-env).")
def compile_cmd(pod_file: Path, out: Path, pod_dir: Path | None, describes: tuple[str, ...], print_env: bool,
                proxy_url: str) -> None:
    """Compile a pod file into per-agent memory.json + metadata.json (+ token, mode 0600)."""
    from manifests.compiler import CompileError, compile_pod

    overrides = {}
    for item in describes:
        if "=" not in item:
            raise click.BadParameter(f"expected SERVICE=PATH, got {item!r}", param_hint="--describe")
        name, path = item.split("=", 1)
        overrides[name] = descriptor_location(path)
    try:
        result = compile_pod(pod_file, out, pod_dir=pod_dir, describe=overrides, fetch=fetch_descriptor)
    except CompileError as exc:
        raise click.ClickException(str(exc)) from None
    for agent in result.agents:
        memory = agent.memory
        what = f"memory via {memory['service']} ({memory['base_url']})" if memory else "no memory"
        token_note = "new token" if agent.new_token else "token kept"
        click.echo(f"{agent.agent_id}: {what}; {token_note}; {out / agent.agent_id}", err=True)
    if print_env:
        for agent in result.agents:
            click.echo(f"# {agent.agent_id}")
            click.echo(f"OPENAI_BASE_URL={proxy_url.rstrip('/')}/v1")
            click.echo(f"OPENAI_API_KEY={agent.token}")
            click.echo(f"ANTHROPIC_BASE_URL={proxy_url.rstrip('/')}")
            click.echo(f"ANTHROPIC_API_KEY={agent.token}")


def descriptor_location(where: str) -> str:
    """A `--describe` value as the compiler reads it: a file path or a descriptor's URL as given; a
    service's base URL (no path) means its `/.claw-describe.json`, as `agent add --memory-url` reads it."""
    from urllib.parse import urlsplit

    from proxy.memory_service.client import DESCRIBE_PATH

    parts = urlsplit(where)
    if parts.scheme in ("http", "https") and parts.path in ("", "/") and not parts.query:
        return where.rstrip("/") + DESCRIBE_PATH
    return where


def fetch_descriptor(url: str, *, token: str | None = None, seconds: float = 5) -> dict:
    """A descriptor URL read by the one memory-service client (for the compiler, which cannot import it)."""
    from manifests.compiler import DescriptorUnavailable
    from proxy.memory_service import MemoryServiceError

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        return _with_client(url, headers, "", lambda client: client.describe(url), seconds=seconds)
    except MemoryServiceError as exc:
        raise DescriptorUnavailable(str(exc)) from None


DESCRIBE_SECONDS = 2  # `agent add` asks once and goes on without: it must never hang on a dead service


def offered_memory(service: str, base_url: str, token: str | None) -> dict | None:
    """What the service at `base_url` declares in its descriptor, read and validated as `memplane
    compile --describe SERVICE=URL` reads it, as `memory_manifest`'s arguments (`compiler.offered`:
    an agent added by hand calls the paths a compiled one would, and retains in batches where
    offered). A service that does not answer, or whose descriptor is invalid, gives None and a
    one-line notice on stderr: the agent is still added, with the contract's default paths and one
    retain call a turn."""
    from manifests.compiler import CompileError, load_descriptor, offered
    from proxy.memory_service.client import DESCRIBE_PATH

    url = base_url.rstrip("/") + DESCRIBE_PATH
    if not url.startswith(("http://", "https://")):  # the compiler would read anything else as a local file
        why = f"{base_url!r} is not an http(s) URL with a host"
    else:
        try:
            desc, _ = load_descriptor(service, {}, Path.cwd(), {service: url}, Path("--memory-url"),
                                      lambda u: fetch_descriptor(u, token=token, seconds=DESCRIBE_SECONDS))
            return offered(desc)
        except CompileError as exc:
            why = str(exc)
    why = " ".join(why.split())
    click.echo(f"note: agent added with the default paths, without batch retain (one retain call a turn): "
               f"{why[:300]}", err=True)
    return None


@click.group("memory")
def memory_group() -> None:
    """Operate on agents' memories: forget entries, backfill a service from the ledger."""


@memory_group.command("forget")
@click.argument("service")
@click.option("--entry-id", "entry_ids", multiple=True, required=True, help="Ledger id (hist1_…). Repeatable.")
@click.option("--reason", required=True)
@click.option("--agent", "agents", multiple=True, help="Restrict to these agents. Repeatable.")
@CONTEXT_ROOT
@HISTORY_ROOT
def forget_cmd(service: str, entry_ids: tuple[str, ...], reason: str, agents: tuple[str, ...],
               context_root: Path, history_root: Path) -> None:
    """Tombstone entries locally and ask the service to forget them."""
    from memplane_core.telemetry import Telemetry

    from proxy.context_store import ContextStore
    from proxy.operator.memory_ops import OperatorError, forget

    telemetry = Telemetry()
    try:
        outcomes = asyncio.run(forget(ContextStore(context_root, telemetry), history_root, service,
                                      list(entry_ids), reason, agents=agents, telemetry=telemetry))
    except OperatorError as exc:
        raise click.ClickException(str(exc)) from None
    for o in outcomes:
        click.echo(f"{o.agent_id}: {o.tombstoned} tombstone(s) recorded; remote forget: {o.remote}", err=True)


@memory_group.command("backfill")
@click.argument("service")
@click.option("--after", default=None, metavar="RFC3339", help="Only entries after this time.")
@click.option("--limit", default=0, show_default=True, type=click.IntRange(min=0), help="Per agent; 0 = all.")
@click.option("--agent", "agents", multiple=True, help="Restrict to these agents. Repeatable.")
@click.option("--url", default=None, help="Override the retain endpoint URL.")
@click.option("--auth-token", default=None, help="Override the bearer token used for retain.")
@click.option("--concurrency", default=8, show_default=True, type=click.IntRange(1, 256))
@click.option("--dead-letters", is_flag=True, help="Replay only the entries delivery parked in retain.dead.jsonl.")
@click.option("--redaction-rules", default=None, envvar="MEMPLANE_REDACTION_RULES",
              help="The operator's extra redaction rules (as `memplane serve` uses them).")
@CONTEXT_ROOT
@HISTORY_ROOT
def backfill_cmd(service: str, after: str | None, limit: int, agents: tuple[str, ...], url: str | None,
                 auth_token: str | None, concurrency: int, dead_letters: bool, redaction_rules: str | None,
                 context_root: Path, history_root: Path) -> None:
    """Replay the ledger into a service's retain endpoint (skips tombstoned ids)."""
    from urllib.parse import urlsplit

    from memplane_core.redact import RedactionConfigError, Redactor

    if url is not None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise click.BadParameter(f"{url!r} is not an http(s) URL with a host", param_hint="--url")
    try:
        redactor = Redactor.from_file(redaction_rules)
    except RedactionConfigError as exc:
        raise click.ClickException(str(exc)) from None
    from datetime import datetime

    from tqdm import tqdm

    from memplane_core.telemetry import Telemetry

    from proxy.context_store import ContextStore
    from proxy.operator.memory_ops import OperatorError, backfill

    if after:
        try:
            datetime.fromisoformat(after.replace("Z", "+00:00"))
        except ValueError:
            raise click.BadParameter(f"not an RFC3339 timestamp: {after!r}", param_hint="--after") from None
    bar = tqdm(total=0, unit="entry", disable=not sys.stderr.isatty(), file=sys.stderr)

    def grow(n: int) -> None:
        bar.total = (bar.total or 0) + n
        bar.refresh()

    telemetry = Telemetry()
    try:
        stats = asyncio.run(backfill(ContextStore(context_root, telemetry), history_root, service, after=after,
                                     limit=limit, agents=agents, url=url, auth_token=auth_token,
                                     concurrency=concurrency, telemetry=telemetry, progress=bar.update,
                                     total_hint=grow, redactor=redactor, dead_letters=dead_letters))
    except OperatorError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        bar.close()
    for agent_id, c in stats.per_agent.items():
        click.echo(f"{agent_id}: sent {c['sent']}, skipped-tombstoned {c['skipped_tombstoned']}, failed {c['failed']}",
                   err=True)
    click.echo(f"backfill {service}: sent {stats.sent}, skipped-tombstoned {stats.skipped_tombstoned}, "
               f"failed {stats.failed}", err=True)
    if stats.failed:
        sys.exit(1)


@click.command("audit")
@click.argument("log_file", default="-")
@click.option("--agent", default=None)
@click.option("--since", default=None, metavar="RFC3339")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
def audit_cmd(log_file: str, agent: str | None, since: str | None, as_json: bool) -> None:
    """Summarize memory_op and request logs per agent and service."""
    from proxy.operator.audit import parse_since, render_table, summarize

    if since is not None:
        try:
            since = parse_since(since)
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--since") from None
    if log_file == "-":
        summary = summarize(sys.stdin.buffer, agent=agent, since=since)
    else:
        try:
            with open(log_file, "rb") as fh:
                summary = summarize(fh, agent=agent, since=since)
        except OSError as exc:
            raise click.ClickException(f"{log_file}: {exc.strerror}") from None
    if as_json:
        click.echo(orjson.dumps(summary, option=orjson.OPT_INDENT_2).decode())
    else:
        click.echo(render_table(summary))


@click.command("explain")
@click.argument("turn_id")
@click.option("--url", default="http://127.0.0.1:8080", show_default=True, envvar="MEMPLANE_URL",
              help="The proxy to ask.")
@click.option("--admin-token", default=None, envvar="MEMPLANE_ADMIN_TOKEN")
@click.option("--json", "as_json", is_flag=True, help="The explanation as JSON.")
def explain_cmd(turn_id: str, url: str, admin_token: str | None, as_json: bool) -> None:
    """Why a turn got the memories it got (the id is in its X-Memplane-Turn-Id header)."""
    import urllib.error
    import urllib.request

    from proxy.operator.explain import json_terminal_safe, render_text, terminal_safe

    req = urllib.request.Request(f"{url.rstrip('/')}/memplane/turns/{turn_id}",
                                 headers={"Authorization": f"Bearer {admin_token}"} if admin_token else {})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            doc = orjson.loads(resp.read())
    except urllib.error.HTTPError as exc:
        try:
            message = orjson.loads(exc.read())["error"]["message"]
        except Exception:
            message = exc.reason
        raise click.ClickException(terminal_safe(f"{exc.code}: {message}")) from None
    except (urllib.error.URLError, OSError) as exc:
        raise click.ClickException(f"cannot reach {url}: {getattr(exc, 'reason', exc)}") from None
    click.echo(json_terminal_safe(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode()) if as_json
               else render_text(doc))


def _rest_target(service: str, url: str | None, token: str | None, context_root: Path, agent: str):
    """The service's base URL and bearer token: flags first, else the agent's memory.json."""
    from memplane_core.ids import is_agent_id
    from memplane_core.telemetry import Telemetry

    from proxy.context_store import ContextStore

    if not is_agent_id(agent):
        raise click.BadParameter(f"invalid agent id {agent!r}", param_hint="--agent")
    if url is None:
        ctx = ContextStore(context_root, Telemetry()).get(agent)
        if ctx is None or ctx.memory is None or ctx.memory.service != service:
            raise click.ClickException(f"agent {agent!r} has no memory.json for service {service!r}; pass --url")
        url, token = ctx.memory.base_url, token or ctx.memory.auth_token
    return url.rstrip("/"), ({"Authorization": f"Bearer {token}"} if token else {})


EXPORT_FIELDS = ("key", "scope", "session_id", "type", "value", "importance", "created_at", "updated_at", "said_at",
                 "expires_at", "metadata", "source_entry_ids", "origin", "origins", "writer", "tainted")


@memory_group.command("export")
@click.argument("service")
@click.option("--agent", "agent", required=True, help="The agent whose memories to export.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None, help="JSONL file (default stdout).")
@click.option("--url", default=None, help="The service's base URL (default: from the agent's memory.json).")
@click.option("--auth-token", default=None, help="Bearer token for the service's REST API.")
@CONTEXT_ROOT
def export_cmd(service: str, agent: str, out: Path | None, url: str | None, auth_token: str | None,
               context_root: Path) -> None:
    """Write an agent's memories as JSONL, one memory per line, with everything needed to restore them."""
    from memplane_core.private_files import write_private

    from proxy.memory_service import MemoryServiceError

    base, headers = _rest_target(service, url, auth_token, context_root, agent)

    async def pages(client) -> list[bytes]:
        lines: list[bytes] = []
        for scope in ("agent", "session"):
            cursor = None
            while True:
                memories, cursor = await client.listing(scope=scope, cursor=cursor, limit=500)
                lines += [orjson.dumps({k: m.get(k) for k in EXPORT_FIELDS}) + b"\n" for m in memories]
                if not cursor:
                    break
        return lines

    try:
        lines = _with_client(base, headers, agent, pages)
    except MemoryServiceError as exc:
        if exc.unreachable:
            raise click.ClickException(f"cannot reach {base}: {exc}") from None
        raise click.ClickException(f"{base}: {exc} (does it offer /api/memories?)") from None
    if out is None:
        sys.stdout.buffer.write(b"".join(lines))
    else:
        write_private(out, b"".join(lines))  # memories are what agents were told: 0600
    click.echo(f"exported {len(lines)} memories of {agent} from {service}", err=True)


@memory_group.command("import")
@click.argument("service")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--agent", "agent", required=True, help="The agent the memories belong to.")
@click.option("--url", default=None, help="The service's base URL (default: from the agent's memory.json).")
@click.option("--auth-token", default=None, help="Bearer token for the service's REST API.")
@click.option("--allow-global", is_flag=True, default=False,
              help="Also restore `scope: global` lines as shared memories (every agent reads them); "
                   "without it they are refused and reported.")
@CONTEXT_ROOT
def import_cmd(service: str, file: Path, agent: str, url: str | None, auth_token: str | None,
               allow_global: bool, context_root: Path) -> None:
    """Restore exported memories into any store with the REST API; importing twice changes nothing
    (memories are upserted by key). An import stays inside its agent: a global line needs
    --allow-global. A line that cannot be restored is reported as `line n: …` and the import goes
    on with the next; the exit status is 1 when any line was not imported."""
    from proxy.memory_service import MemoryServiceError

    base, headers = _rest_target(service, url, auth_token, context_root, agent)

    async def restore(client) -> tuple[int, int]:
        done = skipped = 0
        for n, raw in enumerate(file.read_bytes().splitlines(), 1):
            if not raw.strip():
                continue
            body, problem = _import_body(raw, agent, allow_global)
            if problem:
                click.echo(f"line {n}: {problem}; skipped", err=True)
                skipped += 1
                continue
            try:
                _, stored = await client.upsert(body)
                if (body.get("metadata") or {}).get("pinned") is True and isinstance(stored, dict) \
                        and (stored.get("metadata") or {}).get("pinned") is not True:
                    # a store keeps no pin from a write: the pin is restored the audited way
                    await client.edit(stored["id"], {"pinned": True, "reason": "restored by memplane memory import"})
                done += 1
            except MemoryServiceError as exc:
                if exc.unreachable:
                    click.echo(f"imported {done} memories into {service} for {agent}; {skipped} skipped", err=True)
                    raise click.ClickException(f"cannot reach {base}: {exc}") from None
                click.echo(f"line {n}: refused ({exc.status}): {exc.detail}; skipped", err=True)
                skipped += 1
        return done, skipped

    done, skipped = _with_client(base, headers, agent, restore)
    click.echo(f"imported {done} memories into {service} for {agent}; {skipped} skipped", err=True)
    if skipped:
        sys.exit(1)


def _with_client(base: str, headers: dict[str, str], agent: str, work, *, seconds: float = 30):
    """Run `work(client)` with a memory-service client for one CLI command (`seconds` a call)."""
    import aiohttp

    from proxy.memory_service import MemoryService

    async def run():
        async with aiohttp.ClientSession() as session:
            return await work(MemoryService(session, base, headers, agent, timeout=aiohttp.ClientTimeout(total=seconds)))
    return asyncio.run(run())


IMPORT_FIELDS = ("key", "scope", "type", "value", "importance", "metadata", "source_entry_ids", "said_at",
                 "created_at")


def _import_body(raw: bytes, agent: str, allow_global: bool) -> tuple[dict, str | None]:
    """The REST body for one exported line, checked with the REST API's own model (so a bad date or
    a missing value is named before anything is sent); or what is wrong with the line."""
    from pydantic import ValidationError

    from memory_adapters.http.rest_bodies import StoreBody

    try:
        m = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}, "not JSON"
    if not isinstance(m, dict):
        return {}, f"not an exported memory (a JSON {type(m).__name__}, not an object)"
    if m.get("scope") == "global" and not allow_global:
        return {}, "scope 'global' is shared by every agent; pass --allow-global to restore it"
    body = {k: m[k] for k in IMPORT_FIELDS if m.get(k) is not None}
    # the provenance the export showed comes back with it: an import never makes a model's words the user's
    said = {k: m[k] for k in ("origin", "origins", "writer", "tainted") if m.get(k) not in (None, False)}
    if said:
        body["metadata"] = {**(body.get("metadata") if isinstance(body.get("metadata"), dict) else {}), **said}
    body["agent_id"] = agent  # always the agent named on the command line, whatever the line says
    if m.get("scope") in ("session", "agent") and m.get("session_id"):
        body["session_id"] = m["session_id"]  # a turn's agent-wide episode keeps its session: part of its identity
    if m.get("expires_at"):
        body["ttl"] = m["expires_at"]
    try:
        StoreBody.model_validate(body)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"]) or "<root>"
        return {}, f"{field}: {err['msg']}"
    return body, None
