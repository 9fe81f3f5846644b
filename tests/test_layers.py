"""The layers point one way: a memory service can ship without the proxy (DESIGN.md, "Layers").

Read from every import statement, inline imports included, so a lazy import cannot hide a
dependency the wrong way.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FORBIDDEN = {
    "memplane_core": {"proxy", "memory_adapters", "manifests", "memplane_cli"},
    "memory_adapters": {"proxy", "memplane_cli"},
    "manifests": {"proxy", "memory_adapters", "memplane_cli"},
    "proxy": {"memplane_cli"},  # the CLI wires the proxy and the adapters; the proxy never reaches back
}
# The one way back: the old console-script entry point `proxy.cli:main`, a lazy alias of the CLI.
ALLOWED = {("proxy/cli.py", "memplane_cli.main")}


def imported_modules(path: Path) -> list[tuple[int, str]]:
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = path.relative_to(ROOT).with_suffix("").parts[:-node.level]
                out.append((node.lineno, ".".join(base + ((node.module,) if node.module else ()))))
            elif node.module:
                out.append((node.lineno, node.module))
    return out


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_never_imports_a_layer_above_it(package):
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for path in sorted((ROOT / package).rglob("*.py"))
             for line, module in imported_modules(path)
             if module.split(".")[0] in FORBIDDEN[package]
             and (str(path.relative_to(ROOT)), module) not in ALLOWED]
    assert wrong == []


SUBSYSTEMS = {  # a newcomer finds each sub-system by its folder name (issue 26)
    "proxy/retain": {"delivery.py", "delivery_redis.py", "lane.py", "sender.py", "files.py", "job.py"},
    "proxy/memory_service": {"client.py", "answers.py", "errors.py"},
    "proxy/operator": {"ui.py", "explain.py", "metrics.py", "admin.py", "audit.py", "memory_ops.py"},
    "proxy/ledger": {"files.py", "redis_streams.py", "entry.py"},
    "memplane_cli": {"main.py", "runner.py"},
    "proxy/turn": {"steps.py", "value.py", "read.py", "recall.py", "inject.py", "forward.py", "relay.py",
                   "record.py"},  # one turn's named steps (docs/turn.md)
}


@pytest.mark.parametrize("folder", sorted(SUBSYSTEMS))
def test_each_subsystem_lives_in_its_own_folder(folder):
    present = {p.name for p in (ROOT / folder).glob("*.py")}
    assert SUBSYSTEMS[folder] <= present
    assert not [p.name for p in (ROOT / "proxy").glob("*.py")
                if p.name.startswith(("retain", "delivery", "cli_", "ledger", "routing", "memory_client", "recall."))]


def test_old_console_script_entry_point_still_runs_the_cli():
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", "from proxy.cli import main; main()", "--help"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "durable memory for any LLM agent" in out.stdout


# Inside the memory services: the engine is storage- and HTTP-free, the HTTP face serves any
# store, and a store never reaches into another store.
SUB_FORBIDDEN = {
    "memory_adapters/engine": {"memory_adapters.http", "memory_adapters.embedded", "memory_adapters.tiered",
                               "memory_adapters.reference", "aiohttp", "pymongo", "bson", "redis"},
    "memory_adapters/http": {"memory_adapters.embedded", "memory_adapters.tiered", "memory_adapters.reference"},
    "memory_adapters/embedded": {"memory_adapters.tiered", "memory_adapters.reference"},
    "memory_adapters/tiered": {"memory_adapters.embedded", "memory_adapters.reference"},
    "memory_adapters/reference": {"memory_adapters.embedded", "memory_adapters.tiered"},
}


@pytest.mark.parametrize("folder", sorted(SUB_FORBIDDEN))
def test_memory_service_folders_keep_to_their_job(folder):
    wrong = [f"{path.relative_to(ROOT)}:{line} imports {module}"
             for path in sorted((ROOT / folder).rglob("*.py"))
             for line, module in imported_modules(path)
             if any(module == banned or module.startswith(banned + ".") for banned in SUB_FORBIDDEN[folder])]
    assert wrong == []
