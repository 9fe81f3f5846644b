"""The `memplane` command line: serve, adapters, agents, up, demo, compile, memory ops, audit."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import click

from manifests.agents import memory_manifest, write_agent
from memory_adapters.http.admission import DEFAULT_MAX_RETAINS_IN_FLIGHT
from memplane_core.contract import RETAIN_BATCH_PATH
from memplane_core.private_files import private_dir
from memplane_core.redact import Redactor
from memplane_core.telemetry import Telemetry
from proxy.config import (
    DEFAULT_ANTHROPIC_BASE_URL,
    DEFAULT_CONTEXT_ROOT,
    DEFAULT_HISTORY_ROOT,
    DEFAULT_HOME,
    DEFAULT_MEMORY_DIR,
    DEFAULT_OPENAI_BASE_URL,
    ProxySettings,
    default,
    operator_openai_ids,
)
from proxy.forward_policy import DEFAULT_PASSTHROUGH, parse_allow_list

from . import runner
from .ledger import ledger_group
from .ops import CONTEXT_ROOT, offered_memory

DEFAULT_EMBEDDED_URL = "http://127.0.0.1:8081"  # where `memplane up` serves the embedded engine
# Adapters read MEMPLANE_ADAPTER_HOST/PORT; the generic HOST/PORT still work (the first one set wins).
ADAPTER_HOST_ENV = ["MEMPLANE_ADAPTER_HOST", "HOST"]
ADAPTER_PORT_ENV = ["MEMPLANE_ADAPTER_PORT", "PORT"]
REDACTION_RULES = click.option("--redaction-rules", type=click.Path(path_type=Path), default=None,
                               envvar="MEMPLANE_REDACTION_RULES",
                               help="YAML file of extra redaction rules and allow-list patterns.")


def _redactor(rules: Path | None) -> Redactor:
    """The operator's redaction rules, read once by the command (never inside an app builder)."""
    from memplane_core.redact import RedactionConfigError

    try:
        return Redactor.from_file(rules) if rules else Redactor()
    except (RedactionConfigError, OSError) as exc:
        raise click.ClickException(str(exc)) from None


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="memplane")
def main() -> None:
    """memplane: durable memory for any LLM agent, by changing only its base URL."""


WORKERS = click.option(
    "--workers", type=click.IntRange(0), default=1, show_default=True, envvar="MEMPLANE_WORKERS",
    help="Processes serving the port (SO_REUSEPORT), so every core works; 0 = one per core (at most 8).")


def _worker_count(asked: int, refusal: str | None) -> int:
    """The workers to start: `asked`, 0 meaning one per core; more than one only where it is safe
    (`refusal` says why not; docs/DESIGN.md, "Workers")."""
    from .workers import auto_workers

    count = asked or auto_workers()
    if count > 1 and refusal:
        if asked == 0:
            return 1  # "as many as fit": one is what fits here
        raise click.ClickException(f"--workers {asked}: {refusal}.")
    return count


def _check_contexts(settings: ProxySettings) -> None:
    """Report every invalid manifest at start-up (the proxy still serves the rest)."""
    from memplane_core.telemetry import Telemetry

    from proxy.context_store import ContextStore

    store = ContextStore(settings.context_root, Telemetry())
    for agent_id in store.agent_ids():
        store.get(agent_id)


def proxy_settings(p: dict) -> ProxySettings:
    """The proxy's settings from `memplane serve`'s parameters (flags, else their MEMPLANE_* variables,
    else the defaults), checked; `memplane up` builds its proxy from the same (docs/configuration.md)."""
    from memplane_core.redact import RedactionConfigError

    ledger = p["ledger"]
    settings = ProxySettings(
        context_root=p["context_root"], history_root=p["history_root"], openai_base_url=p["openai_base_url"],
        openai_api_key=os.environ.get("OPENAI_API_KEY"), anthropic_base_url=p["anthropic_base_url"],
        anthropic_api_key=os.environ.get("ANTHROPIC_API_KEY"), max_body_bytes=p["max_body_bytes"],
        ledger_max_answer_bytes=p["ledger_max_answer_bytes"],
        upstream_connect_timeout_s=p["upstream_connect_timeout"], upstream_read_timeout_s=p["upstream_read_timeout"],
        max_concurrent_upstream=p["max_concurrent_upstream"],
        max_concurrent_upstream_per_agent=p["max_concurrent_upstream_per_agent"], rate_limit_per_agent=p["rate_limit"],
        rate_limit_burst=p["rate_limit_burst"], redaction_rules=p["redaction_rules"],
        shutdown_grace_s=p["shutdown_grace"], passthrough=p["passthrough"], admin_token=p["admin_token"] or None,
        ledger=ledger, redis_url=p["redis_url"] or ("redis://127.0.0.1:6379/0" if ledger == "redis" else None),
        ledger_prefix=p["ledger_prefix"], retain_claim_idle_s=p["retain_claim_idle"],
        retain_batch=p["retain_batch"], retain_batch_call=p["retain_batch_call"], retain_linger_s=p["retain_linger"],
        retain_max_in_flight=p["retain_in_flight"],
        **operator_openai_ids(dict(os.environ)),
    )
    try:
        Redactor.from_file(settings.redaction_rules)
        parse_allow_list(settings.passthrough)
    except (RedactionConfigError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    return settings


def proxy_settings_from_env(**overrides) -> ProxySettings:
    """What `memplane serve` with no flags would run with: every proxy setting from its MEMPLANE_*
    variable (or OPENAI_BASE_URL / ANTHROPIC_BASE_URL), else its default; `overrides` on top."""
    with serve.make_context("serve", []) as ctx:
        params = dict(ctx.params)
    return proxy_settings({**params, **overrides})


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True, envvar="MEMPLANE_HOST")
@click.option("--port", default=8080, show_default=True, type=int, envvar="MEMPLANE_PORT")
@click.option("--context-root", type=click.Path(path_type=Path), default=DEFAULT_CONTEXT_ROOT,
              show_default=True, envvar="MEMPLANE_CONTEXT_ROOT", help="Compiled per-agent context dirs.")
@click.option("--history-root", type=click.Path(path_type=Path), default=DEFAULT_HISTORY_ROOT,
              show_default=True, envvar="MEMPLANE_HISTORY_ROOT", help="Where per-agent ledgers are written.")
@click.option("--openai-base-url", default=DEFAULT_OPENAI_BASE_URL, show_default=True,
              envvar=["MEMPLANE_OPENAI_BASE_URL", "OPENAI_BASE_URL"], help="Provider base, including /v1.")
@click.option("--anthropic-base-url", default=DEFAULT_ANTHROPIC_BASE_URL, show_default=True,
              envvar=["MEMPLANE_ANTHROPIC_BASE_URL", "ANTHROPIC_BASE_URL"], help="Provider root, without /v1.")
@click.option("--max-body-bytes", default=default("max_body_bytes"), show_default=True, type=int,
              envvar="MEMPLANE_MAX_BODY_BYTES")
@click.option("--ledger-max-answer-bytes", default=default("ledger_max_answer_bytes"), show_default=True,
              type=click.IntRange(1), envvar="MEMPLANE_LEDGER_MAX_ANSWER_BYTES",
              help="What the ledger keeps of one answer; past it, its head, marked truncated.")
@click.option("--upstream-connect-timeout", default=default("upstream_connect_timeout_s"), show_default=True, type=float,
              envvar="MEMPLANE_UPSTREAM_CONNECT_TIMEOUT")
@click.option("--upstream-read-timeout", default=default("upstream_read_timeout_s"), show_default=True, type=float,
              envvar="MEMPLANE_UPSTREAM_READ_TIMEOUT")
@click.option("--max-concurrent-upstream", default=default("max_concurrent_upstream"), show_default=True, type=int,
              envvar="MEMPLANE_MAX_CONCURRENT_UPSTREAM")
@click.option("--max-concurrent-upstream-per-agent", default=default("max_concurrent_upstream_per_agent"),
              show_default=True, type=int, envvar="MEMPLANE_MAX_CONCURRENT_UPSTREAM_PER_AGENT",
              help="One agent's share of the concurrent upstream calls (0 = a quarter of them).")
@click.option("--rate-limit", default=default("rate_limit_per_agent"), show_default=True, type=float, envvar="MEMPLANE_RATE_LIMIT",
              help="Requests per second per agent (0 = off).")
@click.option("--rate-limit-burst", default=default("rate_limit_burst"), show_default=True, type=int, envvar="MEMPLANE_RATE_LIMIT_BURST")
@click.option("--redaction-rules", default=None, envvar="MEMPLANE_REDACTION_RULES",
              help="YAML file of extra redaction rules and allow-list patterns.")
@click.option("--shutdown-grace", default=default("shutdown_grace_s"), show_default=True, type=float, envvar="MEMPLANE_SHUTDOWN_GRACE")
@click.option("--admin-token", default=None, envvar="MEMPLANE_ADMIN_TOKEN",
              help="Bearer token for /metrics and /memplane/* (unset: those answer on loopback only).")
@click.option("--passthrough", default=None, envvar="MEMPLANE_PASSTHROUGH",
              help="Comma-separated 'METHOD /v1/path' entries forwarded besides the turn endpoints "
                   "({id} matches one segment). Default: " + ", ".join(DEFAULT_PASSTHROUGH))
@click.option("--ledger", type=click.Choice(["file", "redis"]), default="file", show_default=True,
              envvar="MEMPLANE_LEDGER", help="file: per-agent files (one proxy); redis: Redis Streams shared by "
              "several proxies (also rate limits, explanations, turn blocks).")
@click.option("--redis-url", default=None, envvar="MEMPLANE_REDIS_URL", help="Redis for --ledger redis.")
@click.option("--ledger-prefix", default=default("ledger_prefix"), show_default=True, envvar="MEMPLANE_LEDGER_PREFIX")
@click.option("--retain-claim-idle", default=default("retain_claim_idle_s"), show_default=True, type=float,
              envvar="MEMPLANE_RETAIN_CLAIM_IDLE",
              help="Seconds a retain may stay unacknowledged before a live proxy claims it (--ledger redis).")
@click.option("--retain-batch", default=default("retain_batch"), show_default=True, type=click.IntRange(1),
              envvar="MEMPLANE_RETAIN_BATCH", help="Entries a lane sends at once as concurrent retains.")
@click.option("--retain-batch-call", default=default("retain_batch_call"), show_default=True,
              type=click.IntRange(1), envvar="MEMPLANE_RETAIN_BATCH_CALL",
              help="Entries per call to a service with a batch endpoint (and per shared-ledger read).")
@click.option("--retain-linger", default=default("retain_linger_s"), show_default=True,
              type=click.FloatRange(0, 5), envvar="MEMPLANE_RETAIN_LINGER",
              help="Seconds a partial batch waits for company.")
@click.option("--retain-in-flight", default=default("retain_max_in_flight"), show_default=True,
              type=click.IntRange(1), envvar="MEMPLANE_RETAIN_IN_FLIGHT",
              help="Retain calls in flight across all agents.")
@WORKERS
def serve(host: str, port: int, context_root: Path, history_root: Path, openai_base_url: str,
          anthropic_base_url: str, max_body_bytes: int, upstream_connect_timeout: float,
          upstream_read_timeout: float, max_concurrent_upstream: int, max_concurrent_upstream_per_agent: int,
          rate_limit: float,
          rate_limit_burst: int, redaction_rules: str | None, shutdown_grace: float,
          admin_token: str | None, passthrough: str | None, ledger: str = "file", redis_url: str | None = None,
          ledger_prefix: str = "memplane", retain_claim_idle: float = 30.0,
          retain_batch: int = default("retain_batch"), retain_batch_call: int = default("retain_batch_call"),
          retain_linger: float = default("retain_linger_s"),
          retain_in_flight: int = default("retain_max_in_flight"), workers: int = 1,
          ledger_max_answer_bytes: int = default("ledger_max_answer_bytes")) -> None:
    """Run the memory proxy."""
    from proxy.app import build_app

    settings = proxy_settings(dict(
        context_root=context_root, history_root=history_root, openai_base_url=openai_base_url,
        anthropic_base_url=anthropic_base_url, max_body_bytes=max_body_bytes,
        ledger_max_answer_bytes=ledger_max_answer_bytes, upstream_connect_timeout=upstream_connect_timeout, upstream_read_timeout=upstream_read_timeout,
        max_concurrent_upstream=max_concurrent_upstream,
        max_concurrent_upstream_per_agent=max_concurrent_upstream_per_agent, rate_limit=rate_limit,
        rate_limit_burst=rate_limit_burst, redaction_rules=redaction_rules, shutdown_grace=shutdown_grace,
        admin_token=admin_token, passthrough=passthrough, ledger=ledger, redis_url=redis_url,
        ledger_prefix=ledger_prefix, retain_claim_idle=retain_claim_idle, retain_batch=retain_batch,
        retain_batch_call=retain_batch_call, retain_linger=retain_linger, retain_in_flight=retain_in_flight))
    _check_contexts(settings)
    workers = _worker_count(workers, "a file ledger has one writer per agent: run the workers on the shared "
                                     "ledger (--ledger redis)" if ledger == "file" else None)
    where = f"ledger redis {settings.redis_url}" if ledger == "redis" else f"history {history_root}"
    click.echo(f"memplane proxy on http://{host}:{port} (context {context_root}, {where}"
               f"{f', {workers} workers' if workers > 1 else ''})", err=True)
    if workers > 1:
        from .workers import Listener, serve_processes

        proxy = Listener(lambda: build_app(settings), host, port, "proxy")
        raise SystemExit(serve_processes([[proxy]] * workers, grace_s=shutdown_grace))
    runner.run(runner.serve([runner.Site(build_app(settings), host, port, "proxy")], grace_s=shutdown_grace))


def _curator_options(fn):
    """The LLM curator's flags (off unless a base URL and a model are given; docs/DESIGN.md, "Curator")."""
    fn = click.option("--curator-model", default=None, envvar="MEMPLANE_CURATOR_MODEL",
                      help="Model the curator asks (turns the curator on, with --curator-base-url).")(fn)
    return click.option("--curator-base-url", default=None, envvar="MEMPLANE_CURATOR_BASE_URL",
                        help="OpenAI-compatible /v1 URL for the optional LLM curator (key: MEMPLANE_CURATOR_API_KEY).")(fn)


def _curator_settings(base_url: str | None, model: str | None):
    from memory_adapters.engine.curator import CuratorSettings
    return CuratorSettings.from_env(base_url=base_url, model=model)


@main.group()
def adapter() -> None:
    """Run a memory adapter (a service behind the memplane contract)."""


@adapter.command("reference")
@click.option("--host", default="127.0.0.1", show_default=True, envvar=ADAPTER_HOST_ENV)
@click.option("--port", default=8081, show_default=True, type=int, envvar=ADAPTER_PORT_ENV)
@click.option("--data-dir", type=click.Path(path_type=Path), default=DEFAULT_HOME / "reference-memory",
              show_default=True, envvar=["MEMPLANE_REFERENCE_DIR", "MEMORY_REF_DIR"])
@click.option("--token", default=None, envvar="MEMPLANE_ADAPTER_TOKEN", help="Require this bearer token.")
@REDACTION_RULES
@WORKERS
def adapter_reference(host: str, port: int, data_dir: Path, token: str | None, redaction_rules: Path | None,
                      workers: int = 1) -> None:
    """The file-backed reference adapter."""
    from memory_adapters.reference.app import build_reference_app

    redactor = _redactor(redaction_rules)
    private_dir(data_dir)  # memories: 0700, like every directory memplane makes for them
    _warn_if_open(host, token)
    workers = _worker_count(workers, None)  # each reads what the others append (reference/store.py)
    click.echo(f"reference memory adapter on http://{host}:{port} (data {data_dir}"
               f"{f', {workers} workers' if workers > 1 else ''})", err=True)
    if workers > 1:
        from .workers import Listener, serve_processes

        listener = Listener(lambda: build_reference_app(data_dir, token=token, redactor=redactor, shared=True),
                            host, port, "reference")
        raise SystemExit(serve_processes([[listener]] * workers))
    runner.run(runner.serve([runner.Site(build_reference_app(data_dir, token=token, redactor=redactor), host, port)]))


@adapter.command("embedded")
@click.option("--host", default="127.0.0.1", show_default=True, envvar=ADAPTER_HOST_ENV)
@click.option("--port", default=8081, show_default=True, type=int, envvar=ADAPTER_PORT_ENV)
@click.option("--data-dir", type=click.Path(path_type=Path), default=DEFAULT_MEMORY_DIR,
              show_default=True, envvar="MEMPLANE_MEMORY_DIR")
@click.option("--token", default=None, envvar="MEMPLANE_ADAPTER_TOKEN", help="Require this bearer token (admin).")
@click.option("--agent-tokens", default=None, envvar="MEMPLANE_ADAPTER_AGENT_TOKENS",
              help="JSON file of per-agent tokens: {agent: token} or {agent: {token, grants}}.")
@REDACTION_RULES
@click.option("--max-retains-in-flight", type=click.IntRange(min=1), default=DEFAULT_MAX_RETAINS_IN_FLIGHT,
              show_default=True, envvar="MEMPLANE_MAX_RETAINS_IN_FLIGHT",
              help="Retain calls worked on at once, shared fairly between agents (one holds at most half, "
                   "or its share when more are busy); the next is answered 503 with Retry-After.")
@_curator_options
@WORKERS
def adapter_embedded(host: str, port: int, data_dir: Path, token: str | None, agent_tokens: str | None,
                     redaction_rules: Path | None, max_retains_in_flight: int, curator_base_url: str | None,
                     curator_model: str | None, workers: int = 1) -> None:
    """The memory engine over one SQLite file: no Redis or MongoDB (the default service)."""
    from memory_adapters.embedded.app import build_embedded_app
    from memory_adapters.embedded.config import EmbeddedSettings
    from memory_adapters.http.auth import load_agent_tokens
    from memplane_core.redact import RedactionConfigError, Redactor
    from memplane_core.telemetry import Telemetry

    try:
        redactor = Redactor.from_file(redaction_rules) if redaction_rules else Redactor()
        tokens = load_agent_tokens(agent_tokens)
        curator = _curator_settings(curator_base_url, curator_model)
        settings = EmbeddedSettings.from_env()
    except (RedactionConfigError, ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    _warn_if_open(host, token or tokens)
    workers = _worker_count(workers, None)  # processes kept in step through the store's change log
    click.echo(f"embedded memory adapter on http://{host}:{port} (data {data_dir}"
               f"{f', {workers} workers' if workers > 1 else ''})", err=True)
    if workers > 1:
        from memory_adapters.embedded.sqlite_store import prepare_store

        from .workers import Listener, first_worker, serve_processes

        try:
            prepare_store(data_dir)  # made once here, not by the workers at once
        except (OSError, sqlite3.Error) as exc:
            raise click.ClickException(f"cannot open the memory store in {data_dir}: {exc}") from None

        def build():  # in each worker: the first embeds what it finds unembedded and runs the curator
            first = first_worker()
            return build_embedded_app(data_dir, redactor=redactor, telemetry=Telemetry(), token=token,
                                      agent_tokens=tokens, settings=settings, shared=True, first=first,
                                      max_retains_in_flight=max_retains_in_flight, curator=curator if first else None)
        raise SystemExit(serve_processes([[Listener(build, host, port, "embedded")]] * workers))
    app = build_embedded_app(data_dir, redactor=redactor, telemetry=Telemetry(), token=token, agent_tokens=tokens,
                             settings=settings, max_retains_in_flight=max_retains_in_flight, curator=curator)
    runner.run(runner.serve([runner.Site(app, host, port)]))


def _warn_if_open(host: str, auth) -> None:
    if not auth and host not in ("127.0.0.1", "localhost", "::1"):
        click.echo(f"warning: listening on {host} without a token: anyone who can reach it can read and "
                   "write every agent's memory (set MEMPLANE_ADAPTER_TOKEN)", err=True)


@adapter.group("tiered", invoke_without_command=True)
@click.option("--host", default="127.0.0.1", show_default=True, envvar=ADAPTER_HOST_ENV)
@click.option("--port", default=8082, show_default=True, type=int, envvar=ADAPTER_PORT_ENV)
@click.option("--redis-url", default="redis://127.0.0.1:6379/0", show_default=True, envvar="MEMPLANE_REDIS_URL")
@click.option("--mongo-url", default="mongodb://127.0.0.1:27017/memplane", show_default=True,
              envvar="MEMPLANE_MONGO_URL")
@click.option("--index-cache-mb", type=int, default=None, envvar="MEMPLANE_INDEX_CACHE_MB",
              help="Memory budget for agents' in-memory indexes, least recently used out (default: unbounded).")
# the same names as `adapter embedded` (their environment variables were read already, by TieredSettings)
@click.option("--token", default=None, help="Require this bearer token (admin); MEMPLANE_ADAPTER_TOKEN.")
@click.option("--agent-tokens", default=None,
              help="JSON file of per-agent tokens: {agent: token} or {agent: {token, grants}}; "
                   "MEMPLANE_ADAPTER_AGENT_TOKENS.")
@click.option("--max-retains-in-flight", type=click.IntRange(min=1), default=None,
              help="Retain calls worked on at once, shared fairly between agents; the next is answered 503 with "
                   f"Retry-After (default {DEFAULT_MAX_RETAINS_IN_FLIGHT}; MEMPLANE_MAX_RETAINS_IN_FLIGHT).")
@REDACTION_RULES
@_curator_options
@WORKERS
@click.pass_context
def adapter_tiered(ctx: click.Context, host: str, port: int, redis_url: str, mongo_url: str,
                   curator_base_url: str | None, curator_model: str | None, index_cache_mb: int | None = None,
                   token: str | None = None, agent_tokens: str | None = None, max_retains_in_flight: int | None = None,
                   redaction_rules: Path | None = None, workers: int = 1) -> None:
    """Redis short-term + MongoDB long-term memory (settings: STM_MAX_ENTRIES, LTM_MAX_ENTRIES, ...)."""
    from memory_adapters.http.auth import load_agent_tokens
    from memory_adapters.tiered.config import TieredSettings

    try:
        settings = TieredSettings.from_env(redis_url=redis_url, mongo_url=mongo_url, index_cache_mb=index_cache_mb,
                                           adapter_token=token, agent_tokens=load_agent_tokens(agent_tokens),
                                           max_retains_in_flight=max_retains_in_flight)
    except (ValueError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    ctx.obj = settings
    redactor = _redactor(redaction_rules)
    if ctx.invoked_subcommand is not None:
        return
    from memory_adapters.tiered.app import build_tiered_app

    try:
        curator = _curator_settings(curator_base_url, curator_model)
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    _warn_if_open(host, settings.adapter_token or settings.agent_tokens)
    workers = _worker_count(workers, None)  # replicas stay coherent through Redis (tiered/coherence.py)
    click.echo(f"tiered memory adapter on http://{host}:{port} (redis {redis_url}, mongo {mongo_url}"
               f"{f', {workers} workers' if workers > 1 else ''})", err=True)
    if workers > 1:
        from .workers import Listener, serve_processes

        replica = Listener(lambda: build_tiered_app(settings, Telemetry(), redactor, curator=curator), host, port)
        raise SystemExit(serve_processes([[replica]] * workers))
    runner.run(runner.serve([runner.Site(build_tiered_app(settings, Telemetry(), redactor, curator=curator), host, port)]))


@adapter_tiered.command("consolidate")
@click.option("--agent", "agents", multiple=True, help="Only these agents (default: all). Repeatable.")
@click.option("--threshold", type=float, default=None, help="Prune below this composite importance.")
@click.option("--redis-url", default=None, envvar="MEMPLANE_REDIS_URL")
@click.option("--mongo-url", default=None, envvar="MEMPLANE_MONGO_URL")
@click.option("--json", "as_json", is_flag=True)
@REDACTION_RULES
@click.pass_obj
def tiered_consolidate(settings, agents: tuple[str, ...], threshold: float | None, redis_url: str | None,
                       mongo_url: str | None, as_json: bool, redaction_rules: Path | None = None) -> None:
    """Merge near-duplicate memories and prune faded ones; report what changed."""
    import asyncio

    import orjson

    from memory_adapters.tiered.app import build_service
    from memory_adapters.tiered.consolidate import consolidate
    from memory_adapters.tiered.ltm import LTMUnavailable

    redactor = _redactor(redaction_rules)
    settings.redis_url = redis_url or settings.redis_url
    settings.mongo_url = mongo_url or settings.mongo_url

    async def go():
        service = build_service(settings, Telemetry(), redactor)
        try:
            return await consolidate(service, list(agents) or None, threshold=threshold)
        finally:
            await service.close()

    try:
        report = asyncio.run(go())
    except LTMUnavailable as exc:
        raise click.ClickException(f"MongoDB unavailable: {exc}") from None
    if as_json:
        click.echo(orjson.dumps(report.as_dict(), option=orjson.OPT_INDENT_2).decode())
        return
    for m in report.merged:
        click.echo(f"merged  {m['agent_id']}: kept {m['kept']} ({m['value'][:60]!r}) <- {', '.join(m['merged'])}")
    for p in report.pruned:
        click.echo(f"pruned  {p['agent_id']}: {p['id']} (importance {p['composite_importance']}) {p['value']!r}")
    click.echo(f"consolidation: {len(report.merged)} merge(s), {len(report.pruned)} pruned")


@main.group()
def agent() -> None:
    """Manage agents in a context root."""


@agent.command("add")
@click.argument("agent_id")
@CONTEXT_ROOT
@click.option("--memory-url", default=None,
              help="Base URL of the agent's memory service (default: the embedded service `memplane up` runs).")
@click.option("--no-memory", is_flag=True, help="Create the agent without memory (no memory.json).")
@click.option("--memory-service", default="memory", show_default=True, help="Service name in memory.json.")
@click.option("--memory-token", default=None, help="Bearer token for the memory service.")
@click.option("--pod", default="", help="Pod name recorded in metadata.json.")
@click.option("--client-provider-key", is_flag=True,
              help="The agent brings its own provider key or subscription: memplane forwards it upstream and knows "
                   "the agent by its X-Memplane-Agent header (metadata.json \"provider_key\": \"client\").")
@click.option("--no-project-scope", is_flag=True,
              help="Coding agents: keep all memories agent-wide instead of scoping work to the declared project.")
@click.option("--project", "project", default=None, metavar="NAME",
              help="Coding agents: the project a call belongs to when the client declares none (no working "
                   "directory, no X-Memplane-Project header): metadata.json \"project\".")
def agent_add(agent_id: str, context_root: Path, memory_url: str | None, no_memory: bool, memory_service: str,
              memory_token: str | None, pod: str, client_provider_key: bool, no_project_scope: bool = False,
              project: str | None = None) -> None:
    """Create (or update) an agent and print its token once."""
    from manifests.validate import ManifestError, validate

    try:
        validate("metadata", {"agent_id": agent_id, "token_sha256": "0" * 64}, "agent id")
    except ManifestError as exc:
        raise click.ClickException(f"invalid agent id {agent_id!r}: {exc}") from None
    if no_memory:
        memory = None
    elif memory_url:
        offer = offered_memory(memory_service, memory_url, memory_token)
        if offer is None:  # not read: the contract's defaults (notice printed)
            memory = memory_manifest(memory_service, memory_url, auth_token=memory_token)
        elif not offer["paths"]:
            raise click.ClickException(f"the memory service at {memory_url} declares no memory capability "
                                       "(recall, retain or forget) in its descriptor")
        else:
            memory = memory_manifest(memory_service, memory_url, auth_token=memory_token, **offer)
    else:  # the embedded engine that `memplane up` serves on its default port
        memory = memory_manifest("embedded", DEFAULT_EMBEDDED_URL, auth_token=memory_token,
                                 retain_batch_path=RETAIN_BATCH_PATH)
    extra: dict[str, object] = {"provider_key": "client"} if client_provider_key else {}
    if no_project_scope:
        extra["project_scope"] = False
    if project is not None:
        from proxy.coding.project import normalise
        name = normalise(project)
        if not name:
            raise click.ClickException("--project needs a name")
        extra["project"] = name
    extra = {**_kept_metadata(context_root / agent_id / "metadata.json"), **extra}
    token, created = write_agent(context_root, agent_id, pod=pod, memory=memory, extra=extra or None)
    if created:
        click.echo(token)
        click.echo(f"(token shown once; also stored in {context_root / agent_id / 'token'} with mode 0600)", err=True)
    else:
        click.echo(f"agent {agent_id} updated; its token is unchanged ({context_root / agent_id / 'token'})", err=True)


# what `agent add` writes from its flags (and the token); anything else in metadata.json was the
# operator's (allowed_models, timezone, …) and survives a re-run
FLAG_METADATA = frozenset({"agent_id", "pod", "token_sha256", "provider_key", "project_scope", "project"})


def _kept_metadata(path: Path) -> dict[str, object]:
    import json

    try:
        current = json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return {k: v for k, v in current.items() if k not in FLAG_METADATA} if isinstance(current, dict) else {}


from .local import demo, up  # noqa: E402  (commands that wire several parts together)

main.add_command(up)
main.add_command(demo)

from .ops import audit_cmd, compile_cmd, explain_cmd, memory_group  # noqa: E402

main.add_command(explain_cmd)
main.add_command(compile_cmd)
main.add_command(memory_group)
main.add_command(audit_cmd)
main.add_command(ledger_group)
