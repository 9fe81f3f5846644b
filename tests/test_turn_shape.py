"""A turn reads as named steps (issue 51, docs/turn.md): no function on its path grows long again.

A new feature extends one step, or adds one; it does not lengthen a function. Read with `ast`, so
the check costs nothing and names the function that outgrew the limit.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 40  # a function a reader takes in without scrolling, decorators and docstring included
# the steps, and the memory tool's two relays (the other two relays are in proxy/turn/relay.py)
TURN_PATH = sorted((ROOT / "proxy" / "turn").glob("*.py")) + [ROOT / "proxy" / "memory_tool" / "loop.py",
                                                              ROOT / "proxy" / "memory_tool" / "stream.py"]
ENTRY = {ROOT / "proxy" / "app.py": {"_turn_route", "route", "errors_middleware"}}  # the handler into the turn


def _functions(path: Path):
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            yield node.name, node.end_lineno - start + 1


def test_no_function_on_the_turn_path_is_long():
    assert all(path.exists() for path in TURN_PATH) and len(TURN_PATH) > 2
    long = [f"{path.relative_to(ROOT)}:{name} is {lines} lines"
            for path in TURN_PATH for name, lines in _functions(path) if lines > MAX_LINES]
    long += [f"{path.relative_to(ROOT)}:{name} is {lines} lines"
             for path, names in ENTRY.items() for name, lines in _functions(path) if name in names
             and lines > MAX_LINES]
    assert long == []


def test_the_relay_is_one_dispatch_over_every_case():
    from proxy.turn.relay import RELAYS

    assert set(RELAYS) == {(stream, tool) for stream in (False, True) for tool in (False, True)}
    assert len(set(RELAYS.values())) == 4

