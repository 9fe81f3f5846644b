"""The files retain delivery keeps beside each agent's ledger.

`retain.cursor` holds the byte offset up to which the memory service acknowledged the ledger;
`retain.dead.jsonl` lists entries that could not be delivered at all (`memplane memory backfill
--dead-letters` replays them). Both are private files written without following symlinks.
"""

from __future__ import annotations

import time
from pathlib import Path

import orjson

from memplane_core.private_files import append_private, write_private

CURSOR_FILE = "retain.cursor"
DEAD_LETTER_FILE = "retain.dead.jsonl"


class CursorStore:
    """Each agent's delivery cursor, one small JSON file per agent."""

    def __init__(self, history_root: Path) -> None:
        self.root = Path(history_root)

    def path(self, agent_id: str) -> Path:
        return self.root / agent_id / CURSOR_FILE

    def exists(self, agent_id: str) -> bool:
        """An agent without a cursor never had memory: nothing was promised to a service."""
        return self.path(agent_id).exists()

    def read(self, agent_id: str) -> int:
        try:
            return int(orjson.loads(self.path(agent_id).read_bytes())["offset"])
        except (FileNotFoundError, KeyError, ValueError, TypeError, orjson.JSONDecodeError):
            return 0

    def write(self, agent_id: str, offset: int) -> None:
        write_private(self.path(agent_id), orjson.dumps({"offset": offset, "ts": time.time()}))


def dead_letter_path(history_root: Path, agent_id: str) -> Path:
    return Path(history_root) / agent_id / DEAD_LETTER_FILE


def append_dead_letter(history_root: Path, agent_id: str, entry_id: str | None, reason: str) -> None:
    """One line per undeliverable entry: its id (the ledger holds the turn) and why."""
    line = orjson.dumps({"entry_id": entry_id, "reason": reason[:500], "ts": time.time()}) + b"\n"
    append_private(dead_letter_path(history_root, agent_id), line)


def read_dead_letters(history_root: Path, agent_id: str) -> set[str]:
    """The entry ids parked in an agent's dead-letter file (odd lines are skipped)."""
    path = dead_letter_path(history_root, agent_id)
    ids: set[str] = set()
    if path.exists():
        for raw in path.read_bytes().splitlines():
            try:
                entry_id = orjson.loads(raw).get("entry_id")
            except (orjson.JSONDecodeError, AttributeError):
                continue
            if isinstance(entry_id, str):
                ids.add(entry_id)
    return ids
