"""Old entry point `proxy.cli:main`, kept so console scripts installed before the CLI moved to
`memplane_cli/` keep working. Imported lazily: the proxy itself never depends on the CLI."""

from __future__ import annotations


def main() -> None:
    from memplane_cli.main import main as cli

    cli()
