"""What "backlog" means everywhere (the `memplane_retain_backlog_entries` gauge and the inspector's
agents page): entries this proxy ledgered since it started that their memory service has not yet
settled (acknowledged, refused or dead-lettered). Entries a previous run left behind settle first and
are not counted."""

from __future__ import annotations

from collections import Counter


class Backlog:
    def __init__(self) -> None:
        self._open: Counter[str] = Counter()

    def add(self, agent_id: str) -> None:
        self._open[agent_id] += 1

    def settle(self, agent_id: str, n: int) -> None:
        left = self._open[agent_id] - n
        if left > 0:
            self._open[agent_id] = left
        else:
            self._open.pop(agent_id, None)

    def __call__(self, agent_id: str | None = None) -> float:
        """All agents' backlog, or one agent's."""
        return float(self._open.get(agent_id, 0) if agent_id is not None else sum(self._open.values()))
