"""`memplane ledger export`: move ledgers between the file ledger and the shared one on Redis.

Entries are copied as they are (same `hist1_…` ids, same JSON), with their tombstones; entries the
target already holds (by id) are skipped, so an interrupted export can simply be run again.
Entries exported into Redis are queued for retain like new turns; the services dedupe by id.
"""

from __future__ import annotations

from pathlib import Path

import click

from proxy.config import DEFAULT_HISTORY_ROOT
from proxy.ledger.redis_streams import open_ledger


@click.group("ledger")
def ledger_group() -> None:
    """The turn ledger: move it between backends."""


@ledger_group.command("export")
@click.option("--from", "source", type=click.Choice(["file", "redis"]), required=True)
@click.option("--to", "target", type=click.Choice(["file", "redis"]), required=True)
@click.option("--history-root", type=click.Path(path_type=Path), default=DEFAULT_HISTORY_ROOT, show_default=True,
              envvar="MEMPLANE_HISTORY_ROOT", help="The file ledger's directory.")
@click.option("--redis-url", default=None, envvar="MEMPLANE_REDIS_URL")
@click.option("--ledger-prefix", default="memplane", show_default=True, envvar="MEMPLANE_LEDGER_PREFIX")
@click.option("--agent", "agents", multiple=True, help="Only these agents (default: all). Repeatable.")
def export_ledger(source: str, target: str, history_root: Path, redis_url: str | None, ledger_prefix: str,
                  agents: tuple[str, ...]) -> None:
    """Copy every entry (and tombstone) of the source ledger into the target ledger."""
    if source == target:
        raise click.ClickException("--from and --to name the same ledger")
    src = open_ledger(history_root, kind=source, redis_url=redis_url, prefix=ledger_prefix)
    dst = open_ledger(history_root, kind=target, redis_url=redis_url, prefix=ledger_prefix)
    total = 0
    try:
        for agent_id in agents or src.agents():
            have = {ref.entry.get("id") for ref in dst.read(agent_id)}
            copied = 0
            for ref in src.read(agent_id):
                if ref.entry.get("id") in have:
                    continue
                dst.append_blocking(agent_id, ref.entry)
                copied += 1
            tombs = src.tombstones(agent_id) - dst.tombstones(agent_id)
            if tombs:
                dst.add_tombstones(agent_id, sorted(tombs), "exported")
            click.echo(f"{agent_id}: {copied} entries, {len(tombs)} tombstones", err=True)
            total += copied
    finally:
        src.close()
        dst.close()
    click.echo(f"ledger export {source} -> {target}: {total} entries", err=True)
