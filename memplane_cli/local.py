"""`memplane up` (proxy + the embedded memory engine, no servers to run) and `memplane demo`."""

from __future__ import annotations

import asyncio
import io
import tempfile
from pathlib import Path

import click

from manifests.agents import ensure_local_agent, memory_manifest, write_agent
from memplane_core.contract import RETAIN_BATCH_PATH
from memplane_core.private_files import private_dir
from proxy.config import DEFAULT_HOME, ProxySettings

from . import runner
from .workers import auto_workers, worker_number

MAX_MEMORY_WORKERS = 4  # each engine process holds its own encoder (~90 MB) and copy of the agents' indexes


def auto_memory_workers(cpus: int | None = None) -> int:
    """Engine processes for `memplane up`: one per core the proxy leaves, 1 to MAX_MEMORY_WORKERS."""
    return max(1, min(MAX_MEMORY_WORKERS, auto_workers(cpus) - 1))


@click.command()
@click.option("--home", type=click.Path(path_type=Path), default=DEFAULT_HOME, show_default=True,
              envvar="MEMPLANE_HOME", help="Where contexts, ledgers and memories live.")
@click.option("--host", default="127.0.0.1", show_default=True, envvar="MEMPLANE_HOST")
@click.option("--port", default=8080, show_default=True, type=int, envvar="MEMPLANE_PORT")
@click.option("--adapter-port", default=8081, show_default=True, type=int, envvar="MEMPLANE_ADAPTER_PORT")
@click.option("--agent", "agent_id", default="default", show_default=True, help="The agent created on first run.")
@click.option("--admin-token", default=None, envvar="MEMPLANE_ADMIN_TOKEN",
              help="Opens /metrics and the inspector (/memplane/ui/) with this token; unset = loopback only.")
@click.option("--workers", type=click.IntRange(0, 2), default=0, envvar="MEMPLANE_WORKERS",
              help="2: the proxy and the memory engine in a process each (both cores work); 1: one process; "
                   "0 (default): 2 on a machine with two cores or more.")
@click.option("--memory-workers", type=click.IntRange(0, 16), default=0, envvar="MEMPLANE_MEMORY_WORKERS",
              help="Processes serving the memory engine over its one store (with --workers 2); 0 (default): "
                   f"one per core beside the proxy's, at most {MAX_MEMORY_WORKERS}.")
def up(home: Path, host: str, port: int, adapter_port: int, agent_id: str, admin_token: str | None,
       workers: int = 0, memory_workers: int = 0) -> None:
    """Run the proxy and the embedded memory engine together, no Redis or MongoDB needed."""
    from memory_adapters.embedded.app import build_embedded_app
    from memory_adapters.embedded.config import EmbeddedSettings
    from memory_adapters.engine.curator import CuratorSettings
    from memplane_core.redact import Redactor
    from memplane_core.telemetry import Telemetry

    from proxy.app import build_app

    try:
        memory_settings = EmbeddedSettings.from_env()  # MEMPLANE_EMBEDDINGS and the rest, read here once
        curator = CuratorSettings.from_env()  # MEMPLANE_CURATOR_*: off unless a model is set
    except ValueError as exc:
        raise click.ClickException(str(exc)) from None
    context_root, history_root, data_dir = home / "context", home / "history", home / "memory"
    for d in (home, context_root, history_root, data_dir):
        private_dir(d)  # turns, tokens and memories: 0700
    # made on first run; a restart keeps what the operator wrote into its files (docs/cli.md)
    token, created = ensure_local_agent(context_root, agent_id,
                                        memory_manifest("embedded", f"http://127.0.0.1:{adapter_port}",
                                                        retain_batch_path=RETAIN_BATCH_PATH))
    # every other proxy setting as `memplane serve` reads it from the environment (MEMPLANE_OPENAI_BASE_URL
    # or OPENAI_BASE_URL, MEMPLANE_RATE_LIMIT, MEMPLANE_PASSTHROUGH, …: docs/configuration.md)
    from .main import proxy_settings_from_env

    settings = proxy_settings_from_env(context_root=context_root, history_root=history_root,
                                       admin_token=admin_token or None)

    def ready(ports: list[int]) -> None:
        click.echo(f"memplane is up: proxy http://{host}:{ports[0]}/v1 -> {settings.openai_base_url}; "
                   f"embedded memory http://127.0.0.1:{ports[1]} (data in {home})", err=True)
        if created:
            click.echo(f"agent '{agent_id}' token (shown once, kept in {context_root / agent_id / 'token'}):",
                       err=True)
            click.echo(token)
        else:
            click.echo(f"agent '{agent_id}': token in {context_root / agent_id / 'token'}", err=True)
        click.echo(f"point your agent here:  OPENAI_BASE_URL=http://{host}:{ports[0]}/v1  "
                   f"OPENAI_API_KEY=<the token>", err=True)
        click.echo(f"inspector: http://{host}:{ports[0]}/memplane/ui/ "
                   f"({'log in with MEMPLANE_ADMIN_TOKEN' if admin_token else 'loopback only, no token set'})",
                   err=True)

    engines = memory_workers or auto_memory_workers()
    shared = (workers or auto_workers()) > 1 and engines > 1

    def engine():
        # with several engine processes (worker 1 is the first of them: worker 0 is the proxy), the
        # first embeds what it finds unembedded and runs the curator (docs/scaling.md)
        first = not shared or worker_number() == 1
        return build_embedded_app(data_dir, redactor=Redactor(), telemetry=Telemetry(), settings=memory_settings,
                                  curator=curator if first else None, shared=shared, first=first)

    if (workers or auto_workers()) > 1:
        # one proxy process (its file ledger has one writer per agent, docs/DESIGN.md, "Workers"); the
        # engine on the other cores, its processes in step through the store's change log
        from memory_adapters.embedded.sqlite_store import prepare_store

        from .workers import Listener, serve_processes

        prepare_store(data_dir)  # made once here: engine processes that made it at once could not all start
        listeners = [Listener(lambda: build_app(settings), host, port, "proxy"),
                     Listener(engine, "127.0.0.1", adapter_port, "embedded")]
        raise SystemExit(serve_processes([[listeners[0]]] + [[listeners[1]]] * (engines if shared else 1),
                                         on_ready=lambda: ready([l.port for l in listeners])))
    sites = [runner.Site(build_app(settings), host, port, "proxy"),
             runner.Site(engine(), "127.0.0.1", adapter_port, "embedded")]
    runner.run(runner.serve(sites, on_ready=ready))


@click.command()
def demo() -> None:
    """Show the whole memory loop offline: tell a fact, then ask for it in a new conversation."""
    asyncio.run(_demo())


async def _demo() -> None:
    from openai import AsyncOpenAI

    from memory_adapters.embedded.app import build_embedded_app
    from memory_adapters.embedded.config import EmbeddedSettings
    from memplane_core.redact import Redactor
    from memplane_core.telemetry import Telemetry, make_logger

    from proxy.app import STATE, build_app
    from proxy.testing.fake_provider import FakeProvider

    log = io.StringIO()
    provider = FakeProvider()
    with tempfile.TemporaryDirectory(prefix="memplane-demo-") as tmp:
        root = Path(tmp)
        prov_runner, prov_port = await runner.start_site(runner.Site(provider.app(), "127.0.0.1", 0))
        ref_runner, ref_port = await runner.start_site(
            runner.Site(build_embedded_app(root / "memory", redactor=Redactor(), telemetry=Telemetry(make_logger(log)),
                                           settings=EmbeddedSettings.from_env()),
                        "127.0.0.1", 0))
        token, _ = write_agent(root / "context", "demo-agent", pod="demo",
                               memory=memory_manifest("embedded", f"http://127.0.0.1:{ref_port}",
                                                      retain_batch_path=RETAIN_BATCH_PATH))
        settings = ProxySettings(context_root=root / "context", history_root=root / "history",
                                 openai_base_url=f"http://127.0.0.1:{prov_port}/v1", openai_api_key="sk-operator")
        app = build_app(settings, Telemetry(make_logger(log)))
        proxy_runner, proxy_port = await runner.start_site(runner.Site(app, "127.0.0.1", 0))
        try:
            client = AsyncOpenAI(base_url=f"http://127.0.0.1:{proxy_port}/v1", api_key=token, max_retries=0)
            fact = "Remember that my favourite colour is teal and my cat is called Miso."
            click.secho("conversation 1", bold=True)
            click.echo(f"  user:      {fact}")
            r1 = await client.chat.completions.create(model="fake-model", messages=[{"role": "user", "content": fact}])
            click.echo(f"  assistant: {r1.choices[0].message.content}")
            state = app[STATE]
            await state.settle()
            question = "What is my cat called?"
            click.secho("\nconversation 2 (a brand-new message list)", bold=True)
            click.echo(f"  user:      {question}")
            r2 = await client.chat.completions.create(
                model="fake-model", messages=[{"role": "system", "content": "You are helpful."},
                                              {"role": "user", "content": question}])
            click.echo(f"  assistant: {r2.choices[0].message.content}")
            block = provider.received[-1].memories_block
            click.secho("\nthe <memories> block the provider received:", bold=True)
            click.echo(block or "(none)")
            click.secho("\nmemory_op log lines:", bold=True)
            for line in log.getvalue().splitlines():
                if '"memory_op"' in line:
                    click.echo(line)
            ok = block is not None and "Miso" in block
            click.secho("\nmemory works: the fact from conversation 1 reached conversation 2." if ok
                        else "\nthe fact did not reach conversation 2.", fg="green" if ok else "red")
            if not ok:
                raise SystemExit(1)
            await client.close()
        finally:
            await proxy_runner.cleanup()
            await ref_runner.cleanup()
            await prov_runner.cleanup()
